"""``dpaudit run``: one config -> task data and canaries (shared) -> each variant trained -> evaluated ->
one comparison report, in the run folder :mod:`dpaudit.run_folder` lays out.

``--resume`` continues an interrupted run in the same OUT: finished variants (checkpoint and report written by
the same config) are kept, the interrupted one continues from its latest snapshot (dp_adam, lmo_dp, user_dp;
dp_frost and pmixed variants write no snapshots and retrain from their start with the same seeds, which draws the
same noise). A config, manifest or data that differ from the interrupted run's are refused before any work.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from pathlib import Path

from dpaudit import device, progress
from dpaudit.canaries import manifest as canaries
from dpaudit.errors import DpauditError
from dpaudit.folders import make_parents, remove_if_empty
from dpaudit.io import check_out, printable
from dpaudit.report import write as report
from dpaudit.run import config
from dpaudit.run.outputs import evaluate_folder
from dpaudit.run_folder import MARKER, RunFolder
from dpaudit.tasks import registry
from dpaudit.trainers import distributed, methods
from dpaudit.trainers.snapshot import Snapshots


def fingerprint(raw: dict, variant: str, data_fingerprint: str) -> str:
    """What a variant's training is: the whole config (variants but this one left out) and the data."""
    shared = {k: v for k, v in raw.items() if k != "variants"}
    mine = [v for v in raw.get("variants", []) if v.get("name") == variant]
    blob = json.dumps({"config": shared, "variant": mine, "data": data_fingerprint}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _finished(out: Path, v, fp: str) -> dict | None:
    """The report of a variant this config already finished in ``out`` (None when it has to run)."""
    run = RunFolder(out)
    if not ((run.checkpoint(v.name) / "run.json").exists() and run.has_report(v.name)):
        return None
    done = run.run_record(v.name)
    if fingerprint(done.get("config", {}), v.name, done.get("data", {}).get("fingerprint")) != fp:
        raise DpauditError(f"{out / v.name} was trained from a different config or data; resume with the config "
                           f"that made {out}, or choose another --out")
    return run.report(v.name)


def _check_resumable(out: Path, cfg, fps: dict, resume: bool, every: int) -> None:
    """Before any work: an interrupted variant's snapshot needs --resume, and must be this config's."""
    for v in cfg.variants:
        snaps = Snapshots(RunFolder(out).train_state(v.name), every, fps[v.name], resume)
        if snaps.latest() is None:
            continue
        if not resume:
            raise DpauditError(f"{snaps.folder} holds an interrupted run; pass --resume to continue it, or remove the "
                               "folder to start the variant over")
        state = json.loads((snaps.latest() / "state.json").read_text())
        if state.get("fingerprint") != fps[v.name]:
            raise DpauditError(f"the snapshot in {snaps.folder} belongs to a different config, canaries or data; "
                               f"resume with the config that made it, or remove {snaps.folder} to start over")


def _check_not_foreign(out: Path) -> None:
    """Before any work: an --out that holds files (other than hidden ones) and no earlier run is refused, so a run
    never writes its variants, REPORT.md and report.json among someone's files."""
    if not out.is_dir():
        return
    own = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    if own and not RunFolder(out).holds_a_run():
        raise DpauditError(f"--out {out} holds files and no earlier run ({printable(own[0])[:60]}"
                           f"{f' and {len(own) - 1} more' if len(own) > 1 else ''}): pass a new or empty folder, or "
                           "the --out of an earlier run to redo it")


def _preflight(cfg, data, manifest) -> None:
    """What a later variant would find only when it starts, found before the first one trains: a step count past
    the cap, a record-level Gaussian target epsilon no noise reaches, and what a method's own ``preflight`` refuses
    (trainers.methods.preflight, shared with the dry run)."""
    from dpaudit import accounting
    from dpaudit.tasks import assets
    from dpaudit.trainers import engine

    assets.cache_dir()  # an unusable cache folder is found now, not when the first model is built
    n = len(data.train) + len(manifest.training_texts())
    for v in cfg.variants:
        eng = v.trainer.engine
        methods.preflight(cfg, v, data, manifest, n)  # a step count past the cap, a target no noise reaches, ...
        rate = cfg.canaries.sample_rate
        methods.check_canary_rate(v, rate)
        if eng.private and methods.get(v.trainer.method).gaussian_target and n > 0:
            plan = engine.record_plan(n, eng)
            accounting.check_reachable(eng.target_epsilon, plan.delta, max(plan.sample_rate, rate or 0.0), plan.steps,
                                       f"variant {v.name!r}: ")


def canary_plan(cfg) -> canaries.CanaryPlan:
    """The config's canary plan with its evaluation plan and, for the rare-token and bigram designs, the pool
    chosen from the base model and public text (dpaudit/canaries/pools.py): all before any training."""
    plan = dataclasses.replace(cfg.canaries, evaluation=cfg.evaluate.plan(cfg.canaries))
    if plan.design in canaries.POOL_DESIGNS:
        from dpaudit.canaries import pools as canary_pools
        from dpaudit.trainers import pretrain

        model, tok = pretrain.build(cfg.model)
        plan = canary_pools.resolve(plan, tok, model)
    return plan


def run(cfg_path: Path, out: Path, command: str, redact: bool = False,
        only: tuple[str, ...] = (), resume: bool = False, snapshot_every: int = 100, train_only: bool = False) -> dict:
    """Train, audit and compare every variant of the config at ``cfg_path`` into ``out``; snapshots every
    ``snapshot_every`` logical steps (0: none); ``resume`` continues an interrupted run in ``out``. ``train_only``:
    write the checkpoints and stop (no report, no comparison); returns {variant: checkpoint folder} then."""
    if not isinstance(snapshot_every, int) or isinstance(snapshot_every, bool) or snapshot_every < 0:
        raise DpauditError(f"--snapshot-every must be an integer >= 0, got {snapshot_every!r}")
    if train_only and resume:
        raise DpauditError("--train-only cannot be combined with --resume yet; resume the interrupted run, then audit "
                           "with `dpaudit evaluate`")
    out = check_out(out)
    cfg = config.load(cfg_path, only)  # fails before any work on bad input
    for v in cfg.variants:  # a device this machine does not have: before any work
        device.resolve(v.trainer.engine.device, f"train.device of variant {v.name!r}")
    distributed.init_from_env()
    distributed.check_variants(cfg.variants)
    if distributed.world()[1] > 1:
        if resume:
            raise DpauditError("--resume is not supported under torchrun yet (snapshots are per process); resume in "
                               "one process or start over")
        snapshot_every = 0  # snapshots hold one process's streams: none under torchrun (docs/scaling.md)
    out = Path(out)
    if resume and not out.is_dir():
        raise DpauditError(f"--resume: {out} is not the folder of an interrupted run; drop --resume to start one")
    _check_not_foreign(out)
    data = registry.load_data(dataclasses.asdict(cfg.task))
    fps = {v.name: fingerprint(cfg.to_dict(), v.name, data.fingerprint()) for v in cfg.variants}
    _check_resumable(out, cfg, fps, resume, snapshot_every)
    finished = {v.name: _finished(out, v, fps[v.name]) for v in cfg.variants} if resume else {}
    # the evaluation plan is fixed with the canaries, before any training
    manifest = canaries.generate(canary_plan(cfg))
    _preflight(cfg, data, manifest)
    created = ([out] if not out.exists() else []) + make_parents(out)
    out.mkdir(exist_ok=True)
    # one run writes into --out at a time (torchrun: rank 0, the one that writes); the others refused in one line
    with RunFolder(out).held() if distributed.is_main() else contextlib.nullcontext():
        marked = not (out / MARKER).exists()
        RunFolder(out).mark()  # dpaudit's own folder from now on: a later run may redo or resume it
        try:
            return _variants(cfg, out, data, manifest, finished, fps, command, redact, snapshot_every, resume,
                             train_only)
        except BaseException:  # a refusal, a failure or ^C during training: no empty --out left behind (anything
            if marked and [p.name for p in out.iterdir()] == [MARKER]:  # written, a finished variant's checkpoint,
                (out / MARKER).unlink()  # is kept, and with it the marker)
            remove_if_empty(created)
            raise


def _variants(cfg, out: Path, data, manifest, finished: dict, fps: dict, command: str, redact: bool,
              snapshot_every: int, resume: bool, train_only: bool) -> dict:
    """Train (and audit) every variant into ``out``, then write the comparison; every progress bar of a variant
    names it (:func:`dpaudit.progress.label`).
    Over 8 parameters: the run's inputs and the command's options passed on from run(); internal."""
    run = RunFolder(out)
    reports = {}
    for v in cfg.variants:
        if finished.get(v.name) is not None:
            reports[v.name] = finished[v.name]
            continue
        method = methods.get(v.trainer.method)
        with progress.label(v.name):
            if not distributed.is_main():  # torchrun: the other ranks train; rank 0 writes and evaluates
                method.fit(cfg, v, data, manifest, run.checkpoint(v.name))
                continue
            snaps = (Snapshots(run.train_state(v.name), snapshot_every, fps[v.name], resume) if method.snapshots
                     else None)
            folder = method.fit(cfg, v, data, manifest, run.checkpoint(v.name), snapshots=snaps)
            if snaps is not None:
                snaps.clear()  # the checkpoint is written: the snapshots have served
            if train_only:
                reports[v.name] = folder
                continue
            reports[v.name] = evaluate_folder(folder, cfg.evaluate, command, run.report_dir(v.name), redact)
    if distributed.is_main() and not train_only:
        report.write_comparison(reports, out, command, cfg.to_dict(), redact=redact)
    return reports
