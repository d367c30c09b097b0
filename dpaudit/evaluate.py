"""``dpaudit evaluate``: audit one checkpoint as a pipeline of pure steps.

    load checkpoint ─► task metrics ─► score canaries (dpaudit.scoring)
                   ─► audit: every test family, one correction (dpaudit.audit.families)
                   ─► claim check (dpaudit.reaccount) ─► judge (dpaudit.verdict) ─► report dict

:func:`evaluate` returns the report dict (the ``report.json`` contract, :mod:`dpaudit.report`) and writes
nothing; :func:`dpaudit.report.write` renders it. No step changes what it is given.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from dpaudit import checkpoint, checks, eval_plan, options, scoring
from dpaudit.audit import families
from dpaudit.errors import DpauditError
from dpaudit.reaccount import claim_profile, group_delta, lemma_delta, reaccount
from dpaudit.tokens import model_device
from dpaudit.verdict import judge

SCHEMA_VERSION = 1
MAX_REFERENCES = 10 ** 6  # sampled reference secrets: beyond this exposure scoring takes hours


def evaluate(ckpt_dir: Path, attacks=None, n_references: int | None = None, confidence: float | None = None,
             batch_size: int = 64, command: str | None = None, progress: bool = True, rule: str | None = None,
             reference: str | Path | None = None, enumerate_limit: int | None = None, base_metrics: bool = False,
             framing: str = "auto", off_plan: bool = False, device: str = "auto") -> dict:
    """Audit one checkpoint on ``device`` (auto: CUDA when visible, :mod:`dpaudit.device`). ``attacks``, ``rule`` (how the one-run audit's choices are made, see
    :mod:`dpaudit.audit.selection`), ``confidence`` and ``n_references`` come from the evaluation plan fixed in
    the manifest (:mod:`dpaudit.eval_plan`) when left None; a value that departs from it is refused unless
    ``off_plan``. Exposure ranks over the whole space when it has at most ``enumerate_limit`` secrets (None:
    whenever the token trie fits its budget, :func:`dpaudit.scoring.enumerate_whole_space`; 0: never), else
    over ``n_references`` sampled ones. ``base_metrics`` also measures the task metrics of the model before
    fine-tuning (zero-shot for a pretrained LM), the reference a fine-tuning gain is read against."""
    return evaluate_checkpoint(checkpoint.load(ckpt_dir), attacks=attacks, n_references=n_references,
                               confidence=confidence, batch_size=batch_size, command=command, progress=progress,
                               rule=rule, reference=reference, enumerate_limit=enumerate_limit,
                               base_metrics=base_metrics, framing=framing, off_plan=off_plan, device=device)


def evaluate_checkpoint(ck: checkpoint.Checkpoint, attacks=None, n_references: int | None = None,
                        confidence: float | None = None, batch_size: int = 64, command: str | None = None,
                        progress: bool = True, rule: str | None = None, reference=None, enumerate_limit: int | None = None,
                        base_metrics: bool = False, framing: str = "auto", off_plan: bool = False,
                        device: str | None = None) -> dict:
    """:func:`evaluate` of a loaded checkpoint (a folder, or a model held as objects: dpaudit.api.evaluate). The
    model is moved to ``device`` first (None: left where it is); reference models follow it."""
    opts = options_of(ck, attacks=attacks, n_references=n_references, confidence=confidence, batch_size=batch_size,
                      rule=rule, reference=reference, enumerate_limit=enumerate_limit, base_metrics=base_metrics,
                      framing=framing, off_plan=off_plan)
    acct = reaccount(ck.card)  # a card the accountants refuse fails before any model work
    metrics, scored, timings = score_checkpoint(ck, opts, device, progress)
    return finish(ck, opts, metrics, scored, command, timings, acct)


def score_shard(ckpt_dir: Path, shard: tuple[int, int], progress: bool = True, device: str = "auto",
                **evaluation) -> tuple[checkpoint.Checkpoint, dict, dict | None, scoring.CanaryScores, dict]:
    """(checkpoint, options, task metrics (shard 0 only, else None), scores (NaN outside the shard), timings) of shard
    ``shard = (i, n)`` of :func:`evaluate` with the same keyword options (:mod:`dpaudit.shards`)."""
    ck = checkpoint.load(ckpt_dir)
    if evaluation.get("reference") is not None and not isinstance(evaluation["reference"], (str, Path)):
        raise DpauditError("sharded scoring takes the reference model as a path")
    opts = options_of(ck, **evaluation)
    return (ck, opts, *score_checkpoint(ck, opts, device, progress, shard))


def merge(ckpt_dir: Path, part_folders, command: str | None = None) -> dict:
    """The report of the checkpoint from the partials of its n shards: the one-process report (same scores, same
    audit), with the evaluation plan re-derived from the checkpoint."""
    from dpaudit import shards

    ck = checkpoint.load(ckpt_dir)
    used, metrics, scored, timings = shards.merge(ck, shards.read(part_folders))
    opts = options_of(ck, **used)
    if {k: opts[k] for k in shards.OPTION_KEYS} != used:
        raise DpauditError("the partials' options do not resolve to themselves under this checkpoint's evaluation "
                           "plan; re-run the shards on this checkpoint")
    return finish(ck, opts, metrics, scored, command, timings)


def options_of(ck, attacks=None, n_references: int | None = None, confidence: float | None = None,
               batch_size: int = 64, rule: str | None = None, reference=None, enumerate_limit: int | None = None,
               base_metrics: bool = False, framing: str = "auto", off_plan: bool = False) -> dict:
    """The evaluation's options, resolved against the plan fixed in the manifest (:mod:`dpaudit.eval_plan`) and
    checked; ``plan_entry`` says whether they follow it."""
    ck.manifest.check_both_coins()
    if attacks is not None:
        attacks = _check_choices(attacks, rule or "bonferroni")
    used, plan_entry = eval_plan.resolve(ck.manifest.plan.evaluation, off_plan, attacks=attacks, rule=rule,
                                         confidence=confidence, n_references=n_references)
    attacks = _check_choices(used["attacks"], used["rule"])
    checks.check_confidence(used["confidence"], "confidence")
    if not 10 <= used["n_references"] <= MAX_REFERENCES:
        raise DpauditError(f"n_references (--references) must be from 10 to {MAX_REFERENCES:,} (the whole space of up "
                           f"to 10^6 secrets is ranked exactly without it), got {used['n_references']}")
    if batch_size < 1 or batch_size > 4096:
        raise DpauditError(f"batch_size must be from 1 to 4096, got {batch_size}")
    return {"attacks": attacks, "rule": used["rule"], "confidence": used["confidence"],
            "n_references": used["n_references"], "framing": scoring.framing_of(ck, framing),
            "batch_size": batch_size, "enumerate_limit": enumerate_limit,
            "reference": str(reference) if isinstance(reference, (str, Path)) else reference,
            "base_metrics": base_metrics, "off_plan": off_plan, "plan_entry": plan_entry}


def score_checkpoint(ck, opts: dict, device: str | None, progress: bool,
                     shard: tuple[int, int] | None = None) -> tuple[dict | None, scoring.CanaryScores, dict]:
    """(task metrics, canary scores, timings): the model's work. Sharded: shard 0 alone measures the metrics."""
    if device is not None:
        from dpaudit import device as devices

        target = devices.resolve(device, "--device")
    t0 = time.time()
    model, tok = ck.load_model()
    if device is not None:
        model = model.to(target)
    max_len = ck.run.get("model", {}).get("max_len") or ck.run.get("max_len", 64)
    t_load = time.time() - t0
    metrics = task_metrics(ck, model, tok, opts["batch_size"], max_len, opts["base_metrics"]) \
        if shard is None or shard[0] == 0 else None
    t_metrics = time.time() - t0 - t_load
    scored = scoring.score(ck, model, tok, opts["attacks"], batch_size=opts["batch_size"], max_len=max_len,
                           reference=opts["reference"], n_references=opts["n_references"],
                           enumerate_limit=opts["enumerate_limit"], progress=progress, framing=opts["framing"],
                           shard=shard)
    t_attacks = time.time() - t0 - t_load - t_metrics
    return metrics, scored, {"load_s": t_load, "metrics_s": t_metrics, "attacks_s": t_attacks,
                             "total_s": time.time() - t0}


def finish(ck, opts: dict, metrics: dict, scored: scoring.CanaryScores, command: str | None, timings: dict,
           acct: dict | None = None) -> dict:
    """The report: audit, claim check (``acct``, computed here when None) and verdict from the scores."""
    t0 = time.time()
    acct = reaccount(ck.card) if acct is None else acct
    report = build_report(ck, acct, metrics, scored, scoring.whitebox(ck.path, ck.card.to_dict()["mechanism"]),
                          opts["confidence"], opts["rule"])
    plan_entry = opts["plan_entry"]
    report["canary_plan"]["framing"] = opts["framing"]
    report["audit_plan"] = plan_entry
    if plan_entry["status"] == "off-plan":
        report["verdict"] = {**report["verdict"], "off_plan": True,
                             "reason": "EXPLORATORY, off the evaluation plan fixed before training ("
                                       + "; ".join(plan_entry["departures"]) + "): " + report["verdict"]["reason"]}
    report["reproducibility"]["command"] = command
    report["timings"] = {**timings, "total_s": timings.get("total_s", 0.0) + time.time() - t0}
    return report


def _check_choices(attacks, rule: str) -> list[str]:
    attacks = list(dict.fromkeys(attacks))
    unknown = [a for a in attacks if a not in options.ATTACKS]
    if unknown:
        raise DpauditError(f"unknown attack {unknown[0]!r}; choose from {', '.join(options.ATTACKS)}")
    if not attacks:
        raise DpauditError("no attacks selected; pass e.g. --attacks loss,exposure")
    if rule not in options.RULES:
        raise DpauditError(f"unknown threshold rule {rule!r}; choose from {', '.join(options.RULES)}")
    return attacks


def task_metrics(ck, model, tok, batch_size: int, max_len: int, base_metrics: bool) -> dict:
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
    metrics = {**mod.metrics(model, tok, data.test, batch_size, max_len), "source": data.source,
               "split": "validation" if task.get("validation") else "test"}
    if base_metrics:
        base = scoring.base_model(ck)
        if base is not None:
            base = base.to(model_device(model))
        if base is None:
            raise DpauditError("base_metrics needs the model before fine-tuning: the checkpoint has no "
                               "base_model/ and run.json no model spec; drop the option")
        metrics["base_model"] = mod.metrics(base, tok, data.test, batch_size, max_len)
    return metrics


def audit_plan(card, man, confidence: float, rule: str) -> tuple[families.Plan, int]:
    """(the audit plan, repetitions per inserted record). A canary user is a group of records for a
    record-level claim; a user-level claim covers all of one user's records, however many."""
    record_reps = max([c.repetitions for c in man.canaries] + [1])
    reps = record_reps * man.plan.records_per_user if card.claim.unit == "record" else 1
    signs = man.user_groups()[1] if man.per_user else man.signs()  # one coin per canary user
    deltas = ((("claimed", group_delta(card, reps)),) if card.is_private else ()) + (("zero", 0.0),)
    k_pos, k_neg = man.plan.guesses
    plan = families.Plan(signs, k_pos, k_neg, reps, deltas, confidence, rule, man.plan.seed,
                         whitebox_delta=card.claim.delta if card.is_private else 0.0,
                         claim_profile=claim_profile(card))
    return plan, record_reps


def per_audit_unit(man, scores: dict) -> dict:
    """Canary users are scored by the mean over their records; other canaries are their own unit."""
    if not man.per_user:
        return scores
    _, _, owner = man.user_groups()
    counts = np.bincount(owner)
    return {a: np.bincount(owner, weights=sc) / counts for a, sc in scores.items()}


def build_report(ck, acct: dict, metrics: dict, scored: scoring.CanaryScores, whitebox: list | None,
                 confidence: float, rule: str) -> dict:
    """The report dict from the pipeline's results (audit and verdict computed here, nothing mutated)."""
    card, man = ck.card, ck.manifest
    n_families = 2 if record_claim(card) else 1  # every test that can trigger a verdict shares one correction
    plan, record_reps = audit_plan(card, man, families.per_family(confidence, n_families), rule)
    expo = _exposure(man, scored.exposure, card, plan) if scored.exposure is not None else {}
    scores = per_audit_unit(man, scored.scores)
    attack_rows = families.attack_rows(scores, plan.signs, whitebox)
    empirical = families.one_run_rows(scores, plan, whitebox)
    primary = "claimed" if card.is_private else "zero"
    best = families.best(empirical, primary)
    record_rows = _record_level(card, man, scores, plan, record_reps)
    verdict = judge(card, acct, best, families.ceiling(empirical, primary),
                    families.best(record_rows, "record_claim") if record_rows else None,
                    families.curve_rejection(empirical))
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "evaluation",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checkpoint": {"path": None if ck.path is None else str(Path(ck.path)), "hash": ck.hash(),
                       "variant": ck.run.get("variant")},
        **claim_section(card),
        "accounting": acct,
        "empirical": empirical + record_rows,
        "empirical_best": best,
        "family_wise": {"confidence": confidence, "families": n_families,
                        "per_family_confidence": plan.confidence},
        "audit_limits": families.limits(empirical, card.claim.epsilon_value,
                                       card.to_dict()["mechanism"]) if card.is_private else [],
        "noise_checks": noise_checks(whitebox, confidence),
        "threshold_rule": rule,
        "notes": list(scored.notes),
        "attacks": attack_rows,
        "exposure": expo,
        "metrics": metrics,
        "canary_plan": {"m": man.plan.m, "inserted": int(np.sum(plan.signs > 0)), "repetitions": record_reps,
                        "records_per_user": man.plan.records_per_user, "audit_group_size": plan.group_size,
                        "k_pos": plan.k_pos, "k_neg": plan.k_neg, "space_size": man.plan.space_size},
        "verdict": verdict,
        "reproducibility": {
            "command": None,
            "config": ck.run.get("config"),
            "seeds": ck.run.get("seeds"),
            "data": ck.run.get("data"),
            "train_result": ck.run.get("train_result"),
            "checkpoint_hash": ck.hash(),
            "versions": checkpoint.versions(),
            "machine": checkpoint.machine(),
        },
    }


def noise_checks(whitebox: list | None, confidence: float) -> list[dict]:
    """Per white-box canary set that allows it, how much noise its recorded updates carry at most
    (dpaudit/audit/noise_check.py): a check of the card's sigma beside the verdict, not one of its tests."""
    from dpaudit.audit import noise_check

    return [{"attack": w["name"], "kind": w["kind"], **noise_check.from_sums(w["noise_check"],
                                                                             w["noise_check"]["noise_multiplier"],
                                                                             confidence)}
            for w in whitebox or [] if w.get("noise_check")]


def claim_section(card) -> dict:
    """The report's ``claim`` and ``mechanism`` entries, from the privacy card."""
    return {"claim": {"epsilon": card.claim.epsilon, "delta": card.claim.delta, "unit": card.claim.unit,
                      "neighbouring": card.claim.neighbouring, "accountant": card.claim.accountant,
                      "method": card.method, "trainable": card.trainable, "private": card.is_private,
                      "rng": (card.extra or {}).get("rng")},
            "mechanism": card.to_dict()["mechanism"]}


def _exposure(man, exposure: scoring.ExposureScores, card, plan: families.Plan) -> dict:
    canaries = [{"id": c.id, "inserted": c.inserted, "repetitions": c.repetitions, "secret": c.secret}
                for c in man.canaries]
    return families.exposure_report(canaries, exposure.canary_bits, exposure.reference_bits, man.signs(),
                                    man.plan.space_size, exposure.enumerated, group_delta(card, plan.group_size),
                                    plan.confidence, plan.group_size, exposure.suffix_scored)


def _record_level(card, man, scores: dict, plan: families.Plan, record_reps: int) -> list[dict]:
    """Group privacy also claims a record-level guarantee: audit it too. A canary user's records share one
    coin, so each audit unit is a group of (records per user x repetitions) records; the bound is divided
    by that group size and uses the group's delta under the record-level claim."""
    rl = record_claim(card)
    if not rl:
        return []
    g = record_reps * man.plan.records_per_user
    return families.record_level_rows(scores, plan, g, lemma_delta(rl["epsilon"], rl["delta"], g))


def record_claim(card) -> dict | None:
    """Group privacy's second claim (record level, ``extra.record_level``) of a user-level card, else None."""
    rl = (card.extra or {}).get("record_level") if card.is_private else None
    return rl if rl and card.claim.unit == "user" else None
