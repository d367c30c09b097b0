"""``dpaudit evaluate DEPLOYMENT``: a PMixED deployment through the five typed steps every evaluation takes
(docs/architecture.md, "The flow"; a checkpoint's are :mod:`dpaudit.evaluation.steps`).

    load ─► score ─► audit ─► judge ─► render
    Loaded   Scored   Audited  Verdict  report dict

    loaded = load(path, options, seed)         # the deployment, its card bound to its manifest, the plan
    scored = score(loaded)                     # the model's work: perplexity, canary queries, the transcript
    audited = audit(loaded, scored)            # the exact check, its accounting, the shared Evidence value
    verdict = judge(loaded, audited)           # the one rule of dpaudit.claim.verdict, a frozen Verdict
    report = render(loaded, scored, audited, verdict)   # dpaudit.report.build.deployment

Each step takes the earlier steps' values whole, returns a new frozen value and changes nothing it is given. The
guards are the checkpoint's: an edited canaries.json is never reported "as planned" (the card's manifest digest),
and the one-run audit needs both coins. What differs is the model's work (queries through the protocol, not
weights, :mod:`dpaudit.pmixed.evaluate`) and the audit's neighbour: inserting a canary changes its partition's
model only, a replace-one-partition neighbour (group size 2 against the claim, beside the record-level reading).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpaudit import checkpoint
from dpaudit.audit import families
from dpaudit.canaries import plan as eval_plan
from dpaudit.canaries.manifest import Manifest, load_manifest
from dpaudit.claim.card import PrivacyCard, load_card
from dpaudit.claim.reaccount import ClaimAccounting, lemma_delta
from dpaudit.claim.verdict import Verdict
from dpaudit.evaluation.evidence import Evidence
from dpaudit.evaluation.options import EvalOptions
from dpaudit.evaluation.steps import verdict_of
from dpaudit.pmixed import evaluate as work
from dpaudit.pmixed.deployment import Deployment
from dpaudit.report import build as report_build
from dpaudit.run_folder import read_run_record

ATTACK = work.ATTACK
GROUP_SIZE = 2  # inserting a canary replaces its partition's model: two add/remove steps
N_FAMILIES = 2  # the partition claim at group size 2 and the record-level reading share one correction


@dataclass(frozen=True)
class Loaded:
    """Step 1: the deployment, its card and manifest (bound by the card's digest, both coins present), the
    evaluation plan fixed before training (or its recorded departure), the run record and the task data."""

    path: Path
    deployment: Deployment
    card: PrivacyCard
    manifest: Manifest
    run: dict
    plan_entry: dict
    confidence: float
    whitebox_queries: int
    seed: int
    data: object | None


@dataclass(frozen=True)
class Scored:
    """Step 2: the protocol's work. ``canaries``: :func:`dpaudit.pmixed.evaluate.canary_audit`'s scores,
    queries and exact divergences; ``transcript``: the divergences of the queries users asked, with owners."""

    metrics: dict
    canaries: dict
    transcript: tuple[np.ndarray, list]
    timings: dict


@dataclass(frozen=True)
class Audited:
    """Step 3: the exact check of the per-query claim, the accounting it joins, and the canaries' one-run
    evidence as the same :class:`dpaudit.evaluation.evidence.Evidence` value every evaluation's judge reads."""

    exact: dict
    accounting: ClaimAccounting
    evidence: Evidence


def evaluate_deployment(path: Path, options: EvalOptions | None = None, command: str | None = None,
                        seed: int = 0) -> dict:
    """The report of one PMixED deployment (the report.json contract, plus a ``pmixed`` section); writes nothing.

    Args:
        path: the deployment folder (``dpaudit run`` writes it as a variant's checkpoint).
        options: of :class:`dpaudit.evaluation.options.EvalOptions` it reads ``confidence`` (default: the
            manifest's evaluation plan; a departure needs ``off_plan``), ``whitebox_queries`` and ``device``;
            attacks and reference models do not apply to a deployment.
        command: the command line recorded in the report's reproducibility section.
        seed: the evaluation's seed (subset sampling and the answers' draws).

    Returns:
        The report dict, as :func:`dpaudit.evaluation.steps.evaluate` returns a checkpoint's.

    Raises:
        DpauditError: the folder is not a deployment, its manifest was edited after the card was written (without
            ``off_plan``), the manifest lacks one of the two coins, or the task data changed since training.
    """
    t0 = time.time()
    loaded = load(Path(path), options or EvalOptions(), seed)
    scored = score(loaded)
    audited = audit(loaded, scored)
    verdict = judge(loaded, audited)
    return render(loaded, scored, audited, verdict, command, time.time() - t0)


def load(path: Path, options: EvalOptions, seed: int = 0) -> Loaded:
    """Step 1 (see :class:`Loaded`): every refusal happens here, before any query is asked."""
    dep = Deployment.load(path, options.device or "auto")
    card, man = load_card(path / "privacy_card.json"), load_manifest(path / "canaries.json")
    edited = checkpoint.check_manifest_digest(card, man, options.off_plan)  # never reported "as planned"
    man.check_both_coins()  # the one-run audit compares inserted with held-out canaries (as every checkpoint's)
    _, plan_entry = eval_plan.resolve(man.plan.evaluation, options.off_plan, confidence=options.confidence,
                                      attacks=None, rule=None, n_references=None)
    plan_entry = eval_plan.with_departure(plan_entry, edited)
    run = read_run_record(path / "run.json")
    return Loaded(path, dep, card, man, run, plan_entry, plan_entry["used"]["confidence"],
                  options.whitebox_queries, seed, work.task_data(run))


def score(loaded: Loaded) -> Scored:
    """Step 2: the held-out perplexity (when the run names a task), every canary's secret queried through the
    protocol, and the first queries users asked (the deployment's transcript)."""
    t0 = time.time()
    dep, run = loaded.deployment, loaded.run
    metrics = {}
    if loaded.data is not None:
        ppl = work.perplexity(dep, [r["text"] for r in loaded.data.test], loaded.seed)
        metrics = {"task": run["task"]["name"], "perplexity": ppl["pmixed"], "n_test": len(loaded.data.test),
                   "source": loaded.data.source, "split": "validation" if run["task"].get("validation") else "test",
                   "pmixed_perplexity": ppl}
    t_metrics = time.time() - t0
    canaries = work.canary_audit(dep, loaded.manifest, loaded.seed + 1, loaded.whitebox_queries)
    transcript = work.transcript_queries(dep, loaded.whitebox_queries)
    return Scored(metrics, canaries, transcript, {"metrics_s": t_metrics, "attacks_s": time.time() - t0 - t_metrics})


def audit(loaded: Loaded, scored: Scored) -> Audited:
    """Step 3: the exact check over the canaries' and the transcript's queries, the accounting it joins, and the
    canaries' one-run rows: the partition claim at group size 2 and the record-level reading, one correction."""
    card, man = loaded.card, loaded.manifest
    logged, logged_owners = scored.transcript
    ex = work.exact_check(loaded.deployment, np.concatenate([scored.canaries["whitebox"], logged]),
                          scored.canaries["owners"] + logged_owners, card.claim.delta)
    ex["transcript_queries_checked"] = len(logged)
    acct = work.accounting(card, ex)
    signs = man.signs()
    k_pos, k_neg = man.plan.guesses
    eps, dlt = card.claim.epsilon_value, card.claim.delta
    plan = families.Plan(signs, k_pos, k_neg, GROUP_SIZE, (("claimed", lemma_delta(eps, dlt, GROUP_SIZE)),
                                                           ("zero", 0.0)),
                         families.per_family(loaded.confidence, N_FAMILIES), "bonferroni", man.plan.seed)
    scores = {ATTACK: scored.canaries["scores"]}
    empirical = families.one_run_rows(scores, plan, None)
    record_rows = families.record_level_rows(scores, plan, 1, dlt)
    ev = Evidence(plan=plan, record_reps=max(c.repetitions for c in man.canaries), n_families=N_FAMILIES,
                  empirical=empirical, record_rows=record_rows, best=families.best(empirical, "claimed"),
                  ceiling=families.ceiling(empirical, "claimed"),
                  record_best=families.best(record_rows, "record_claim"), curve=None,  # no trade-off curve to test
                  attack_rows=families.attack_rows(scores, signs, None), exposure={}, limits=[], noise_checks=[],
                  mechanism_checks=[])
    return Audited(ex, acct, ev)


def judge(loaded: Loaded, audited: Audited) -> Verdict:
    """Step 4: the verdict of the card's claim on its accounting and the evidence, by the rule every evaluation
    uses (:func:`dpaudit.evaluation.steps.verdict_of`)."""
    return verdict_of(loaded.card, audited.accounting, audited.evidence, loaded.plan_entry)


def render(loaded: Loaded, scored: Scored, audited: Audited, verdict: Verdict, command: str | None = None,
           total_s: float | None = None) -> dict:
    """Step 5: the report dict (:func:`dpaudit.report.build.deployment`)."""
    dep = loaded.deployment
    section = {"spec": dep.spec.to_dict(), "betas": list(dep.spec.betas), "rdp_budget": dep.spec.rdp_budget,
               "per_query_rdp": dep.spec.per_query, "exact": audited.exact,
               "canary_queries": scored.canaries["queries"], "ledger": dep.ledger.state(), "seed": loaded.seed}
    timings = {**scored.timings, "total_s": total_s if total_s is not None else sum(scored.timings.values())}
    return report_build.deployment(loaded, scored, audited, verdict.as_dict(), section,
                                   work.content_hash(loaded.path), command, timings)
