"""``dpaudit run``: one config -> task data and canaries (shared) -> each variant trained -> evaluated ->
one comparison report. Output layout::

    OUT/REPORT.md, OUT/report.json           the comparison
    OUT/<variant>/checkpoint/                 the checkpoint dir (docs/architecture.md)
    OUT/<variant>/report/                     that variant's REPORT.md, report.json and plots
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dpaudit import canaries, config, device, eval_plan, report
from dpaudit.evaluate import evaluate
from dpaudit.tasks import registry
from dpaudit.trainers import dp_adam, dp_frost, lmo_dp, pmixed, user_dp

TRAINERS = {"dp_frost": dp_frost, "lmo_dp": lmo_dp, "pmixed": pmixed}  # record-level methods with their own module; else dp_adam


def run(cfg_path: Path, out: Path, command: str, progress: bool = True, redact: bool = False,
        only: tuple[str, ...] = ()) -> dict:
    cfg = config.load(cfg_path, only)  # fails before any work on bad input
    for v in cfg.variants:  # a device this machine does not have: before any work
        device.resolve(v.trainer.engine.device, f"train.device of variant {v.name!r}")
    data = registry.load_data(dataclasses.asdict(cfg.task))
    ev = cfg.evaluate  # the evaluation plan is fixed with the canaries, before any training
    manifest = canaries.generate(dataclasses.replace(cfg.canaries, evaluation=eval_plan.planned(
        ev.attacks, ev.rule, ev.confidence, ev.n_references)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    reports = {}
    for v in cfg.variants:
        trainer = user_dp if v.trainer.user_level else TRAINERS.get(v.trainer.method, dp_adam)
        ck = trainer.fit(cfg, v, data, manifest, out / v.name / "checkpoint", progress=progress)
        if v.trainer.method == "pmixed":  # a deployment, audited through its outputs
            from dpaudit.pmixed import evaluate as pmixed_eval
            from dpaudit.pmixed import report as pmixed_report

            r = pmixed_eval.evaluate_deployment(ck, confidence=cfg.evaluate.confidence, command=command,
                                                progress=progress, whitebox_queries=cfg.evaluate.whitebox_queries)
            pmixed_report.write(r, out / v.name / "report", redact=redact)
            reports[v.name] = r
            continue
        r = evaluate(ck, n_references=cfg.evaluate.n_references, confidence=cfg.evaluate.confidence,
                     batch_size=cfg.evaluate.batch_size, command=command, progress=progress,
                     attacks=list(cfg.evaluate.attacks), rule=cfg.evaluate.rule,
                     enumerate_limit=cfg.evaluate.enumerate_limit, base_metrics=cfg.evaluate.base_metrics)
        report.write(r, out / v.name / "report", redact=redact)
        reports[v.name] = r
    report.write_comparison(reports, out, command, cfg.to_dict(), redact=redact)
    return reports
