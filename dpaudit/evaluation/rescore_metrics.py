"""``dpaudit check --checkpoint --rescore``: the report's task metrics measured again on the model
(dpaudit/evaluation/rescore.py).

The policy's ``min_accuracy`` reads ``metrics.accuracy``; without ``--rescore`` the metrics are taken from the
report (the gate's output says so). With it, the task the checkpoint's run.json names is loaded (its data's
fingerprint checked, as ``dpaudit evaluate`` checks it), measured by the same function
(:func:`dpaudit.evaluation.steps.task_metrics`), and each value must be the report's: counts, names and
fingerprints exactly; a rate or a perplexity to float rounding; the per-example outcomes (``correct``) and the
accuracy within :data:`FLIPS` examples (an example at the decision boundary may flip on another device or batch
size). The base model's metrics (``metrics.base_model``, where the report has them) are measured again the same
way, on the base ``evaluate`` read. A report whose checkpoint names no task has no metrics to measure. Needs the training install (torch).
"""

from __future__ import annotations

import math

from dpaudit.errors import DpauditError

FLIPS = 2  # test examples whose outcome may differ on another device (a logit tie at the boundary)
RTOL = 1e-3


def mismatches(report: dict, ck, model, tok, batch_size: int) -> tuple[list[str], bool]:
    """(one line per metric that is not the model's; whether the metrics were measured) for ``report`` of the
    checkpoint ``ck`` whose model and tokenizer are ``model`` and ``tok``.

    Args:
        report: The parsed report.json.
        ck: The loaded checkpoint (its run.json names the task).
        model: Its model.
        tok: Its tokenizer.
        batch_size: Examples per forward pass.

    Returns:
        (lines, measured); measured is False where the report has no metrics or the checkpoint names no task.
    """
    from dpaudit.evaluation.steps import task_metrics

    said = report.get("metrics")
    if not isinstance(said, dict) or not said or not (ck.run.get("task") or {}).get("name"):
        return [], False
    base = "base_model" in said
    try:
        got = task_metrics(ck, model, tok, batch_size, base_metrics=base)
    except DpauditError as e:
        if not base:
            raise
        got = task_metrics(ck, model, tok, batch_size, base_metrics=False)
        got["base_model"] = f"cannot be measured again ({e})"
    wrong = _compare(said, got, "")
    if base:
        want = got["base_model"]
        wrong += _compare(said["base_model"], want, "base_model.") if isinstance(want, dict) and \
            isinstance(said["base_model"], dict) else [f"base_model: {want if isinstance(want, str) else 'not a table'}"]
    return ([f"the report's task metrics are not the model's ({'; '.join(wrong[:3])}"
             f"{f' (and {len(wrong) - 3} more)' if len(wrong) > 3 else ''})"] if wrong else []), True


def _compare(said: dict, got: dict, prefix: str) -> list[str]:
    """One line per metric of ``got`` (measured) that ``said`` (the report's) does not match, and per metric the
    report has that the task does not (``base_model``, compared apart, aside)."""
    n = got.get("n_test") or 1
    wrong = []
    for key, want in got.items():
        if key == "base_model":
            continue
        have = said.get(key)
        if key == "correct" and isinstance(want, str):
            flips = sum(a != b for a, b in zip(have, want)) if isinstance(have, str) and len(have) == len(want) \
                else None
            if flips is None or flips > FLIPS:
                wrong.append(f"{prefix}correct: {flips if flips is not None else 'not one outcome per example'} of "
                             f"{len(want)} test outcomes differ")
        elif isinstance(want, float) and not isinstance(have, bool) and isinstance(have, (int, float)):
            slack = (FLIPS / n + 1e-9) if key == "accuracy" else 0.0
            if not (abs(have - want) <= slack or math.isclose(have, want, rel_tol=RTOL, abs_tol=1e-9)):
                wrong.append(f"{prefix}{key}: the report has {have:.6g}, the model gives {want:.6g}")
        elif have != want:
            wrong.append(f"{prefix}{key}: the report has {have!r}, the model gives {want!r}")
    extra = sorted(k for k in said if k not in got and k != "base_model")
    return wrong + [f"{prefix}{k}: in the report, not among the task's metrics" for k in extra]
