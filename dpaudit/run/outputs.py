"""What a method wrote, evaluated and written as a report (``dpaudit evaluate`` and every variant of ``dpaudit run``):
a checkpoint through the evaluation steps (:mod:`dpaudit.evaluation.steps`), or a PMixED deployment through its
outputs (:mod:`dpaudit.pmixed.steps`). It sits above both, so that neither imports the other's caller."""

from __future__ import annotations

from pathlib import Path

from dpaudit.evaluation.options import EvalOptions
from dpaudit.evaluation.steps import evaluate
from dpaudit.pmixed import report as pmixed_report
from dpaudit.pmixed import steps as pmixed_steps
from dpaudit.pmixed.deployment import is_deployment
from dpaudit.report import write as report


def evaluate_folder(folder: Path, opts: EvalOptions, command: str | None, out: Path, redact: bool = False) -> dict:
    """The report of what a method wrote, written into ``out``: a checkpoint's evaluation, or a PMixED
    deployment's (audited through its outputs); the folder's files tell which."""
    if is_deployment(folder):
        r = pmixed_steps.evaluate_deployment(folder, opts, command=command)
        pmixed_report.write(r, out, redact=redact)
        return r
    r = evaluate(folder, opts, command=command)
    report.write(r, out, redact=redact)
    return r
