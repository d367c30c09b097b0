"""The claim check: re-derive a privacy card's epsilon with every accountant (docs/architecture.md).

The claim must be certified by one sound accountant; the largest value is reported as the re-accounted
epsilon (never under-report). A card whose sampler is not the Poisson sampling the accountants assume is a
finding, not a crash. Group privacy (a record-level mechanism on data capped at k records per user, claimed
at user level) is accounted through the group lemma for every accountant and by the exact
mixture-of-Gaussians PLD.
"""

from __future__ import annotations

from dpaudit import accounting, options
from dpaudit.accounting import group
from dpaudit.errors import DpauditError


def reaccount(card) -> dict:
    """{results, reaccounted_epsilon (largest), certified_epsilon (smallest sound), tolerance, findings}."""
    if not card.is_private:
        return {"results": [], "reaccounted_epsilon": None, "certified_epsilon": None,
                "tolerance": options.ACCOUNTING_TOLERANCE, "findings": []}
    res = _group_results(card) if card.group_size > 1 else accounting.compute_all(card.events, card.claim.delta)
    findings = [f"batches were drawn by '{ev.sampler}' but the accountants assume Poisson sampling; the "
                "re-accounted epsilon does not cover this mechanism" for ev in card.events if ev.sampler != "poisson"]
    return {
        "results": [r.to_dict() for r in res],
        "reaccounted_epsilon": accounting.conservative(res).epsilon,  # the largest: never under-report
        "certified_epsilon": min(r.epsilon for r in res if r.delta <= card.claim.delta * (1 + 1e-9)),
        "tolerance": options.ACCOUNTING_TOLERANCE,
        "findings": findings,
    }


def _group_results(card) -> list:
    """User-level epsilon of a record-level mechanism on data capped at k records per user: every
    accountant's record-level epsilon through the group lemma, and the exact mixture-of-Gaussians PLD."""
    k = card.group_size
    rl = card.extra.get("record_level") if card.extra else None
    if not rl or "delta" not in rl:
        raise DpauditError("the card has group_size > 1 but no extra.record_level {epsilon, delta}; add the "
                           "record-level delta the mechanism was calibrated at")
    out = []
    for name in accounting.ACCOUNTANTS:
        e_r = accounting.compute(card.events, rl["delta"], name).epsilon
        ue, ud = group.lemma(e_r, rl["delta"], k)
        out.append(accounting.AccountingResult(f"{name}+group_lemma", ue, ud))  # certifies only if ud <= delta
    out.append(accounting.AccountingResult("pld_group_mixture",
                                           group.subsampled_gaussian_group_epsilon(card.events, card.claim.delta, k),
                                           card.claim.delta))
    return out


def group_delta(card, group_size: int) -> float:
    """delta for a group of ``group_size`` records under the claim (group privacy lemma); 0 without a claim."""
    return lemma_delta(card.claim.epsilon_value, card.claim.delta, group_size) if card.is_private else 0.0


def lemma_delta(epsilon: float, delta: float, group_size: int) -> float:
    """The delta an (epsilon, delta) guarantee gives a group of ``group_size`` units (group privacy lemma),
    capped below 1 so that an audit at it stays defined."""
    return float(min(0.999, group.lemma(epsilon, delta, group_size)[1]))
