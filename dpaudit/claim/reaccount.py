"""The claim check: re-derive a privacy card's epsilon with every accountant (docs/architecture.md).

Every accountant that analyses the stated mechanism (sampler, neighbouring relation) gives its interval; the
claim is verified by one sound upper value, refuted by one lower value, and otherwise unverifiable
(:mod:`dpaudit.claim.status`). The largest upper value is reported as the re-accounted epsilon (never
under-report). A card whose sampler no accountant models exactly, or whose sample rate disagrees with its
batch and dataset sizes, is a finding, not a crash. Group privacy (a record-level mechanism on data capped at k records per user, claimed
at user level) is accounted through the group lemma for every accountant and by the exact
mixture-of-Gaussians PLD.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpaudit import accounting, options
from dpaudit.accounting import AccountingResult, group
from dpaudit.claim import status as claim_check
from dpaudit.errors import DpauditError
from dpaudit.markup import probability


@dataclass(frozen=True)
class ClaimAccounting:
    """The accounting check of a card (:func:`reaccount`), one frozen value; :meth:`as_dict` is report.json's
    ``accounting`` object, the one place it is serialised.

    Attributes:
        results: every accountant's interval on the card's mechanism (``dpaudit.accounting.AccountingResult``).
        not_applicable: accountant name -> why it does not analyse this mechanism.
        reaccounted_epsilon: the largest upper value (the number reported: never under-report).
        certified_epsilon: the smallest sound upper value at the claim's delta (None: no accountant certifies).
        lower_epsilon: the largest valid lower value (None: no accountant gives one).
        status: ``verified | under-claim | unverifiable`` (``options.ACCOUNTING_STATUSES``); None without a claim.
        reason: the status in words.
        findings: what keeps the accountants' numbers from certifying the card (one line each).
        tolerance: the relative numerical tolerance of the comparison with the claim.
    """

    results: tuple[AccountingResult, ...]
    not_applicable: Mapping[str, str]
    reaccounted_epsilon: float | None
    certified_epsilon: float | None
    lower_epsilon: float | None
    status: str | None
    reason: str
    findings: tuple[str, ...] = ()
    tolerance: float = field(default=options.ACCOUNTING_TOLERANCE)

    def __post_init__(self):
        if self.status is not None and self.status not in options.ACCOUNTING_STATUSES:
            raise ValueError(f"accounting status {self.status!r} is not one of "
                             f"{', '.join(options.ACCOUNTING_STATUSES)}")

    def as_dict(self) -> dict[str, Any]:
        """report.json's ``accounting`` object (fresh plain containers: editing it leaves this value as it was)."""
        return {"results": [r.to_dict() for r in self.results], "not_applicable": dict(self.not_applicable),
                "reaccounted_epsilon": self.reaccounted_epsilon, "certified_epsilon": self.certified_epsilon,
                "lower_epsilon": self.lower_epsilon, "tolerance": self.tolerance, "findings": list(self.findings),
                "status": self.status, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: dict) -> ClaimAccounting:
        """report.json's ``accounting`` object as the typed value.

        Raises:
            DpauditError: the object is not one :meth:`as_dict` writes (a key missing or of another type).
        """
        try:
            return cls(tuple(AccountingResult(**r) for r in d["results"]), dict(d["not_applicable"]),
                       d["reaccounted_epsilon"], d["certified_epsilon"], d["lower_epsilon"], d["status"], d["reason"],
                       tuple(d["findings"]), float(d["tolerance"]))
        except (KeyError, TypeError, ValueError) as e:
            raise DpauditError(f"the report's accounting cannot be read ({type(e).__name__}: {e}); re-make the "
                               "report with `dpaudit evaluate`") from e

    @classmethod
    def judged(cls, claim, results, findings, not_applicable) -> ClaimAccounting:
        """The check of ``claim`` (a card's :class:`dpaudit.claim.card.Claim`) from the accountants' ``results``
        (:mod:`dpaudit.claim.status`'s rule), with the ``findings`` and ``not_applicable`` reasons beside them."""
        check = claim_check.status(claim.epsilon_value, claim.delta, claim.neighbouring,
                                   [r.to_dict() for r in results], list(findings), dict(not_applicable))
        return cls(tuple(results), dict(not_applicable),
                   max((r.epsilon for r in results if r.epsilon is not None), default=None),  # never under-report
                   check["upper"], check["lower"], check["status"], check["reason"], tuple(findings))

    def joined(self, extra: AccountingResult, claim) -> ClaimAccounting:
        """This check with one more accountant's answer (``extra``: PMixED's exact lower value, say), judged again."""
        return self.judged(claim, (*self.results, extra), self.findings, self.not_applicable)


def reaccount(card) -> ClaimAccounting:
    """The accounting check of ``card`` (a :class:`dpaudit.claim.card.PrivacyCard`).

    Returns:
        The frozen :class:`ClaimAccounting`: every accountant's interval, the largest upper value, the smallest
        sound one, the largest lower one, the findings, the status and its reason.

    Raises:
        DpauditError: a group-privacy card without the record-level delta its group lemma needs.
    """
    if not card.is_private:
        return ClaimAccounting((), {}, None, None, None, None, "no claim")
    relation = card.claim.neighbouring
    if card.group_size > 1:
        res, skipped = _group_results(card)
    else:
        res, skipped = accounting.intervals(card.events, card.claim.delta, relation, card.dataset_size)
    return ClaimAccounting.judged(card.claim, res, card_findings(card, [r.to_dict() for r in res]), skipped)


SAMPLE_RATE_SLACK = 0.05  # relative disagreement between q and expected_batch_size / dataset_size that is a finding


def card_findings(card, results: list[dict]) -> list[str]:
    """What keeps the accountants' numbers from certifying the card: a sampler no analysis models exactly, a
    sample rate that disagrees with the stated batch and dataset sizes."""
    out = []
    for ev in card.events:
        if ev.sampler == "shuffle":
            rdp = [r for r in results if r["accountant"] == "dpa_rdp"]
            got = (f"accounted as sampling without replacement of q*N records per step (replace-one): epsilon <= "
                   f"{rdp[0]['epsilon']:.4g}, " if rdp else "")
            out.append(f"batches were drawn by 'shuffle': {got}but a shuffled epoch is not independent sampling, so no "
                       "accountant certifies it; train with Poisson sampling (Opacus DPDataLoader)")
        elif ev.sampler != "poisson":
            out.append(f"batches were drawn by '{ev.sampler}', which no accountant here analyses; train with Poisson "
                       "sampling (Opacus DPDataLoader)")
    b, n = card.expected_batch_size, card.dataset_size
    # the batch and dataset sizes describe one sampling rate; phases at different rates (DP-FROST's selection
    # and training) are not checked against them
    if b and n and card.group_size == 1 and card.claim.unit == "record" and len({e.sample_rate for e in card.events}) == 1:
        for ev in card.events:
            implied = b / n
            if abs(ev.sample_rate - implied) > SAMPLE_RATE_SLACK * implied:
                out.append(f"the card's sample rate q = {ev.sample_rate:.4g} disagrees with expected_batch_size / "
                           f"dataset_size = {b:g} / {n} = {implied:.4g}; write the rate the sampler used "
                           "(Opacus: 1 / len(data_loader); dpaudit.claim.opacus_card.card_from_opacus records it)")
                break
    return out


def _group_results(card) -> tuple[list, dict]:
    """User-level epsilon of a record-level mechanism on data capped at k records per user: every
    accountant's record-level epsilon through the group lemma, and the exact mixture-of-Gaussians PLD."""
    k = card.group_size
    rl = card.extra.get("record_level") if card.extra else None
    if not rl or "delta" not in rl:
        raise DpauditError("the card has group_size > 1 but no extra.record_level {epsilon, delta}; add the "
                           "record-level delta the mechanism was calibrated at")
    out, skipped = [], {}
    for name in accounting.GAUSSIAN_ACCOUNTANTS:
        try:
            e_r = accounting.compute(card.events, rl["delta"], name).epsilon
            assert e_r is not None  # compute always answers with an upper value
        except accounting.NotApplicable as e:  # Opacus' accountants in dpaudit[audit] (no Opacus)
            skipped[f"{name}+group_lemma"] = str(e)
            continue
        ue, ud = group.lemma(e_r, rl["delta"], k)
        out.append(accounting.AccountingResult(  # certifies only if ud <= delta
            f"{name}+group_lemma", ue, ud, detail=f"record-level epsilon {e_r:.4g} at delta {probability(rl['delta'], 3)}, "
                                                  f"group of {k} (upper only)"))
    out.append(accounting.AccountingResult(
        "pld_group_mixture", group.subsampled_gaussian_group_epsilon(card.events, card.claim.delta, k),
        card.claim.delta, detail=f"exact mixture of Gaussians for {k} records, pessimistic PLD (upper only)"))
    return out, skipped


def group_delta(card, group_size: int) -> float:
    """delta for a group of ``group_size`` records under the claim (group privacy lemma); 0 without a claim."""
    return lemma_delta(card.claim.epsilon_value, card.claim.delta, group_size) if card.is_private else 0.0


def lemma_delta(epsilon: float, delta: float, group_size: int) -> float:
    """The delta an (epsilon, delta) guarantee gives a group of ``group_size`` units (group privacy lemma),
    capped below 1 so that an audit at it stays defined."""
    return float(min(0.999, group.lemma(epsilon, delta, group_size)[1]))


def claim_profile(card, points: int = 400) -> tuple | None:
    """The card's mechanism as a privacy profile (eps_j, delta_j), delta_j from dp_accounting's pessimistic PLD
    on a grid up to 3 x the claimed epsilon (+ 4), for the f-DP test of the card's whole trade-off curve
    (:func:`dpaudit.audit.fdp.rejects_profile`). None where that curve is not the audit unit's: no claim, group
    privacy (group_size > 1), a sampler or noise the PLD does not model, replace-one neighbours."""
    if not card.is_private or card.group_size > 1 or card.claim.neighbouring != "add_remove":
        return None
    events = card.events
    if not events or any(not isinstance(e, accounting.SubsampledGaussian) or e.sampler != "poisson"
                         or not e.noise_multiplier for e in events):
        return None
    import numpy as np

    from dpaudit.accounting import dpa_pld

    eps = np.linspace(0.0, 3.0 * card.claim.epsilon_value + 4.0, points)
    return eps, dpa_pld.privacy_profile(events, eps)
