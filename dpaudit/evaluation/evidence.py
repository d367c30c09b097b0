"""Step 3 of ``dpaudit evaluate`` (docs/architecture.md, "The flow"): the audit of one evaluation's scores.

    load ─► score ─► **audit** ─► judge ─► render

From the canary scores (and the white-box records) to every test family's one-run lower bounds under one
correction, the bounds' limits, the exposure reading and the noise checks: an :class:`Evidence` value, which
the judge (:mod:`dpaudit.claim.verdict`) and the renderer (:mod:`dpaudit.report.build`) read and never change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpaudit.audit import families
from dpaudit.audit.mechanism import Audited
from dpaudit.audit.rows import MechanismEvidence, TestRow
from dpaudit.claim import verdict as verdict_rule
from dpaudit.claim.reaccount import claim_profile, group_delta, lemma_delta
from dpaudit.claim.verdict import Grounds
from dpaudit.probe import readback


@dataclass(frozen=True)
class Evidence:
    """What the audit found. ``empirical``: the claim's test rows (``record_rows``: group privacy's second,
    record-level claim); ``best``: the row the verdict reads; ``ceiling``: the most any test could show."""

    plan: families.Plan
    record_reps: int
    n_families: int
    empirical: list[TestRow]
    record_rows: list[TestRow]
    best: TestRow | None
    ceiling: float
    record_best: TestRow | None
    curve: TestRow | None
    attack_rows: list
    exposure: dict
    limits: list
    noise_checks: list
    mechanism_checks: list[MechanismEvidence]
    two_sample: list = ()  # past thresholding (families.two_sample_rows): beside the family, not in the verdict

    def grounds(self) -> Grounds:
        """What the judge step reads of this evidence (:class:`dpaudit.claim.verdict.Grounds`)."""
        return Grounds(self.best, self.ceiling, self.record_best, self.curve, mechanism=self.mechanism_checks,
                       noise_checks=self.noise_checks)


def audit(loaded, scored) -> Evidence:
    """Step 3: the evidence of the score step's value ``scored`` (:class:`dpaudit.evaluation.steps.Scored`) and
    the load step's white-box records against the claim of the checkpoint's card, with its canaries, at the
    resolved confidence and rule (``loaded``: :class:`dpaudit.evaluation.steps.Loaded`)."""
    ck, opts = loaded.ck, loaded.opts
    return gather(ck.card, ck.manifest, scored.canaries, loaded.whitebox, loaded.mechanism, opts.confidence, opts.rule)


def gather(card, man, scored, whitebox: list | None, mechanism: Audited, confidence: float, rule: str) -> Evidence:
    """:func:`audit` on its parts: ``scored`` the canary scores (:class:`dpaudit.evaluation.scoring.CanaryScores`)
    and the white-box records against the claim of ``card``, with the canaries of ``man``."""
    return gather_units(card, man, per_audit_unit(man, scored.scores), scored.exposure, whitebox, mechanism,
                        confidence, rule)


def gather_units(card, man, scores: dict, exposure, whitebox: list | None, mechanism: Audited, confidence: float,
                 rule: str) -> Evidence:
    """:func:`gather` from the scores per audit unit (``scores``: attack -> one score per unit, as report.json's
    ``attacks`` keep them) and the exposure scores (None: no exposure section). ``dpaudit check --checkpoint``
    re-derives a report's evidence with it from the report's scores and the folder's records (dpaudit/gate/rederive.py)."""
    n_families = 2 if record_claim(card) else 1  # every test that can trigger a verdict shares one correction
    plan, record_reps = audit_plan(card, man, families.per_family(confidence, n_families), rule)
    expo = _exposure(man, exposure, card, plan) if exposure is not None else {}
    empirical = families.one_run_rows(scores, plan, whitebox)
    primary = "claimed" if card.is_private else "zero"
    record_rows = _record_level(card, man, scores, plan, record_reps)
    return Evidence(
        plan=plan, record_reps=record_reps, n_families=n_families, empirical=empirical, record_rows=record_rows,
        best=families.best(empirical, primary), ceiling=families.ceiling(empirical, primary),
        record_best=families.best(record_rows, "record_claim") if record_rows else None,
        curve=families.curve_rejection(empirical), attack_rows=families.attack_rows(scores, plan.signs, whitebox),
        exposure=expo,
        limits=families.limits(empirical, card.claim.epsilon_value, mechanism, card.canary_sample_rate())
        if card.is_private else [],
        noise_checks=noise_checks(whitebox, confidence), mechanism_checks=mechanism_checks(whitebox, card),
        two_sample=families.two_sample_rows(plan, whitebox, families.per_test(scores, plan, whitebox)))


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


noise_checks = readback.noise_checks  # from the records alone (dpaudit/probe/readback.py): the gate re-derives them
mechanism_checks = readback.mechanism_checks
card_view = readback.card_view


record_claim = verdict_rule.record_claim  # group privacy's second claim (dpaudit/claim/verdict.py)


def _exposure(man, exposure, card, plan: families.Plan) -> dict:
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
