"""``dpaudit evaluate``: audit one checkpoint as a pipeline of typed steps (docs/architecture.md, "The flow").

    load ─► score ─► audit ─► judge ─► render
    Loaded   Scored   Evidence  Verdict  report dict

    loaded = load(ck, options)                 # the checkpoint, the resolved options (device too), the records
    scored = score(loaded)                     # the model's work
    ev = audit(loaded, scored)                 # dpaudit.evaluation.evidence
    verdict = judge(loaded, ev)                # the rule of dpaudit.claim.verdict, a frozen Verdict
    report = render(loaded, scored, ev, verdict)   # dpaudit.report.build

Each step takes the earlier steps' values whole, returns a new value and changes nothing it is given; :func:`evaluate` returns the report dict (the
``report.json`` contract) and writes nothing; :func:`dpaudit.report.write.write` renders it. The options are one
:class:`dpaudit.evaluation.options.EvalOptions`, resolved against the manifest's evaluation plan in the load step.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from dpaudit import checkpoint
from dpaudit.audit.mechanism import Audited
from dpaudit.claim import verdict as rule
from dpaudit.claim.reaccount import ClaimAccounting, reaccount
from dpaudit.claim.verdict import Verdict
from dpaudit.errors import DpauditError
from dpaudit.evaluation import evidence, scoring
from dpaudit.evaluation.options import EvalOptions, Resolved
from dpaudit.report import build as report_build
from dpaudit.tokens import model_device


@dataclass(frozen=True)
class Loaded:
    """Step 1: the checkpoint, the resolved options, the mechanism the audit is about (typed, from the card's
    events), the white-box records (parsed and checked) and the claim's accounting (a card the accountants refuse
    fails here, before any model work)."""

    ck: checkpoint.Checkpoint
    opts: Resolved
    mechanism: Audited
    whitebox: list | None
    accounting: ClaimAccounting


@dataclass(frozen=True)
class Scored:
    """Step 2: the model's work. ``metrics`` is None for a shard other than the first."""

    metrics: dict | None
    canaries: scoring.CanaryScores
    timings: dict


def evaluate(ckpt_dir: Path, options: EvalOptions | None = None, command: str | None = None) -> dict:
    """The report of the checkpoint folder ``ckpt_dir`` under ``options`` (default: the manifest's plan)."""
    options = options or EvalOptions()
    return evaluate_checkpoint(checkpoint.load(ckpt_dir, options.base_model), options, command)


def evaluate_checkpoint(ck: checkpoint.Checkpoint, options: EvalOptions | None = None,
                        command: str | None = None) -> dict:
    """:func:`evaluate` of a loaded checkpoint (a folder, or a model held as objects: dpaudit.api.evaluate)."""
    options = options or EvalOptions()
    loaded = load(ck, options)
    return finish(loaded, score(loaded), command)


def score_shard(ckpt_dir: Path, shard: tuple[int, int], options: EvalOptions) -> tuple[Loaded, Scored]:
    """Shard ``shard = (i, n)`` of :func:`evaluate` (scores NaN outside the shard, :mod:`dpaudit.evaluation.shards`)."""
    loaded = load(checkpoint.load(ckpt_dir, options.base_model), options, shard=True)
    loaded.opts.shard_record()  # a reference model must be a path that every shard can load
    return loaded, score(loaded, shard)


def merge(ckpt_dir: Path, part_folders, command: str | None = None) -> dict:
    """The report of the checkpoint from the partials of its n shards: the one-process report (same scores, same
    audit), with the evaluation plan re-derived from the checkpoint."""
    from dpaudit.evaluation import shards

    parts = shards.read(part_folders)
    ck = checkpoint.load(ckpt_dir, parts[0]["options"].get("base_model"))  # the base every shard scored on
    used, metrics, scored, timings = shards.merge(ck, parts)
    loaded = load(ck, EvalOptions.from_shard_record(used))
    if loaded.opts.shard_record() != used:
        raise DpauditError("the partials' options do not resolve to themselves under this checkpoint's evaluation "
                           "plan; re-run the shards on this checkpoint")
    return finish(loaded, Scored(metrics, scored, timings), command)


def load(ck: checkpoint.Checkpoint, options: EvalOptions, shard: bool = False) -> Loaded:
    """Step 1 (see :class:`Loaded`); a shard only scores: its accounting and white-box records are the merge's."""
    edited = checkpoint.check_manifest(ck, options.off_plan)  # the plan fixed before training, or --off-plan
    framing = scoring.framing_of(ck, options.framing)  # its name checked by EvalOptions
    opts = options.resolve(ck.manifest, framing, scoring.framing_source(ck, options.framing))
    if edited:  # --off-plan on an edited canaries.json: exploratory, whatever the settings
        from dpaudit.canaries import plan as eval_plan

        opts = dataclasses.replace(opts, plan_entry=eval_plan.with_departure(opts.plan_entry, edited))
    mechanism = ck.card.audited_mechanism()
    whitebox = scoring.whitebox(ck.whitebox_dir or ck.path, mechanism, ck.card)  # a shard checks it too: before scoring
    if shard:
        return Loaded(ck, opts, mechanism, None, {})
    return Loaded(ck, opts, mechanism, whitebox, reaccount(ck.card))


def score(loaded: Loaded, shard: tuple[int, int] | None = None) -> Scored:
    """Step 2: task metrics and canary scores on the resolved options' device (None: the model stays where it is;
    reference models follow it). Sharded: shard 0 alone measures the metrics."""
    ck, opts = loaded.ck, loaded.opts
    device = opts.device
    if device is not None:
        from dpaudit import device as devices

        target = devices.resolve(device, "--device")
    t0 = time.time()
    model, tok = ck.load_model()
    if device is not None:
        model = model.to(target)
    t_load = time.time() - t0
    metrics = task_metrics(ck, model, tok, opts.batch_size, opts.base_metrics) \
        if shard is None or shard[0] == 0 else None
    t_metrics = time.time() - t0 - t_load
    settings = scoring.ScoringSettings(tuple(opts.attacks), opts.batch_size, ck.context_len, opts.reference,
                                       opts.n_references, opts.enumerate_limit, opts.framing)
    scored = scoring.score(ck, model, tok, settings, shard)
    t_attacks = time.time() - t0 - t_load - t_metrics
    return Scored(metrics, scored, {"load_s": t_load, "metrics_s": t_metrics, "attacks_s": t_attacks,
                                    "total_s": time.time() - t0})


def finish(loaded: Loaded, scored: Scored, command: str | None) -> dict:
    """Steps 3-5: audit, judge, render (their time added to the report's total)."""
    t0 = time.time()
    ev = audit(loaded, scored)
    verdict = judge(loaded, ev)
    timed = dataclasses.replace(scored, timings={**scored.timings,
                                                 "total_s": scored.timings.get("total_s", 0.0) + time.time() - t0})
    return render(loaded, timed, ev, verdict, command)


audit = evidence.audit  # step 3: (Loaded, Scored) -> Evidence


def judge(loaded: Loaded, ev: evidence.Evidence) -> Verdict:
    """Step 4: the verdict of the claim of the loaded checkpoint's card on its accounting and the evidence
    (:func:`dpaudit.claim.verdict.judge`, the rule; off the plan fixed before training, marked exploratory)."""
    return verdict_of(loaded.ck.card, loaded.accounting, ev, loaded.opts.plan_entry)


def verdict_of(card, accounting: ClaimAccounting, ev: evidence.Evidence, plan_entry: dict | None) -> Verdict:
    """The one verdict rule every evaluation's judge step applies (a checkpoint's here, a PMixED deployment's in
    :mod:`dpaudit.pmixed.steps`): the card's claim, its accounting check and the evidence's grounds."""
    return rule.judge(card, accounting, ev.grounds(), plan_entry)


def render(loaded: Loaded, scored: Scored, ev: evidence.Evidence, verdict: Verdict, command: str | None = None) -> dict:
    """Step 5: the report dict (the ``report.json`` contract, :func:`dpaudit.report.build.evaluation`)."""
    return report_build.evaluation(loaded, scored, ev, verdict.as_dict(), command)


def task_metrics(ck, model, tok, batch_size: int, base_metrics: bool) -> dict:
    """The task's own metrics on its test (or validation) split; {} for a checkpoint without a task."""
    task = ck.run.get("task")
    if not (task and task.get("name")):
        return {}
    from dpaudit.tasks import registry

    mod = registry.get(task["name"])
    data = registry.load_data(task)
    if ck.run.get("data", {}).get("fingerprint") not in (None, data.fingerprint()):
        raise DpauditError(f"the task data no longer matches the checkpoint's fingerprint "
                           f"{ck.run['data']['fingerprint']}; restore the data the model was trained on")
    max_len = ck.context_len
    metrics = {**mod.metrics(model, tok, data.test, batch_size, max_len), "source": data.source,
               "split": "validation" if task.get("validation") else "test"}
    if base_metrics:
        base = scoring.base_model(ck, tok)
        if base is None:
            raise DpauditError("base_metrics needs the model before fine-tuning: the checkpoint has no "
                               "base_model/ and run.json no model spec; drop the option")
        metrics["base_model"] = mod.metrics(base.to(model_device(model)), tok, data.test, batch_size, max_len)
    return metrics
