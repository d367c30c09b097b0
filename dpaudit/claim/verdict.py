"""Step 4 of ``dpaudit evaluate`` (load, score, audit, **judge**, render): the two checks of a claim, reported separately, and one headline.

* accounting (:mod:`dpaudit.claim.status`): ``verified | under-claim | unverifiable``;
* empirical (:func:`empirical`): ``violated | consistent | underpowered | no-power`` — an audit can refute a
  claim only up to its ceiling (the largest bound its tests could give), so a bound below the claim says
  nothing about the claim when the ceiling is below it too;
* headline (dpaudit.options.VERDICTS): ``violated`` (the audit refutes the claim) > ``mechanism-mismatch`` (a
  probe check failed: the code that ran is not the card's mechanism) > ``accounting-mismatch``
  (the accountants refute it) > ``no-claim`` > ``inconclusive`` (accounting unverifiable, or an audit with no
  power) > ``underpowered`` (accounting verified, audit below the claim) >
  ``consistent`` (accounting verified
  and an audit able to refute the claim did not). None of them means "proven private": an audit can only
  ever refute.

Every word is defined once, in docs/verdicts.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dpaudit.audit.rows import MechanismEvidence, TestRow
from dpaudit.errors import DpauditError
from dpaudit.markup import percent
from dpaudit.options import ACCOUNTING_STATUSES, EMPIRICAL_STATUSES, VERDICTS, current_word

if TYPE_CHECKING:
    from dpaudit.claim.reaccount import ClaimAccounting


@dataclass(frozen=True)
class AccountingCheck:
    """The accounting check as the verdict reports it: ``status`` (one of ``options.ACCOUNTING_STATUSES``, None
    where no accounting ran), its ``reason``, and the accountants' interval ``[lower, upper]`` on the card's ε."""

    status: str | None
    reason: str | None
    lower: float | None = None
    upper: float | None = None

    def __post_init__(self):
        if self.status is not None and self.status not in ACCOUNTING_STATUSES:
            raise ValueError(f"accounting status {self.status!r} is not one of {', '.join(ACCOUNTING_STATUSES)}")

    def as_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "lower": self.lower, "upper": self.upper}


@dataclass(frozen=True)
class EmpiricalCheck:
    """The empirical check of a claim (:func:`empirical`): ``status`` (one of ``options.EMPIRICAL_STATUSES``), the
    best lower bound ``epsilon_lb`` at its family-wise ``confidence`` (None where no test ran), the audit's
    ``ceiling`` (the largest bound any of its tests could give) and the ``reason`` in words."""

    status: str
    epsilon_lb: float
    ceiling: float
    confidence: float | None
    reason: str

    def __post_init__(self):
        if self.status not in EMPIRICAL_STATUSES:
            raise ValueError(f"empirical status {self.status!r} is not one of {', '.join(EMPIRICAL_STATUSES)}")

    def as_dict(self) -> dict:
        return {"status": self.status, "epsilon_lb": self.epsilon_lb, "ceiling": self.ceiling,
                "confidence": self.confidence, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    """The judge step's value (:func:`judge`): the headline ``status`` (one of ``options.VERDICTS``) and its
    ``reason``, both checks, and what changed the headline: ``mechanism`` (one line per failed probe or noise
    check; the headline is then ``mechanism-mismatch`` and ``without_mechanism`` the one it would have had),
    ``off_plan`` (evaluated off the plan fixed before training: exploratory). Serialised in one place,
    :meth:`as_dict` (the report's ``verdict`` object); :meth:`from_dict` reads one back."""

    status: str
    reason: str
    accounting: AccountingCheck
    empirical: EmpiricalCheck
    mechanism: tuple[str, ...] = ()
    without_mechanism: str | None = None
    off_plan: bool = False

    def __post_init__(self):
        if self.status not in VERDICTS:
            raise ValueError(f"verdict {self.status!r} is not one of {', '.join(VERDICTS)}")

    def as_dict(self) -> dict:
        """The report's ``verdict`` object (a fresh plain dict: editing it leaves the verdict as it was)."""
        out: dict[str, Any] = {"status": self.status, "reason": self.reason,
                               "accounting": self.accounting.as_dict(), "empirical": self.empirical.as_dict()}
        if self.mechanism:
            out["mechanism"] = list(self.mechanism)
            out["without_mechanism"] = self.without_mechanism
        if self.off_plan:
            out["off_plan"] = True
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Verdict:
        """A report's ``verdict`` object as a typed value, an older report's words read as their current names
        (``options.LEGACY_WORDS``).

        Raises:
            DpauditError: the object is not one :meth:`as_dict` writes (a key missing, a word outside the
                vocabulary of docs/verdicts.md).
        """
        try:
            emp = {**d["empirical"], "status": current_word("empirical", d["empirical"]["status"])}
            return cls(status=current_word("verdict", d["status"]), reason=d["reason"],
                       accounting=AccountingCheck(**d["accounting"]), empirical=EmpiricalCheck(**emp), mechanism=tuple(d.get("mechanism") or ()),
                       without_mechanism=d.get("without_mechanism"), off_plan=bool(d.get("off_plan", False)))
        except (KeyError, TypeError, ValueError) as e:
            raise DpauditError(f"the report's verdict cannot be read ({type(e).__name__}: {e}); re-make the report "
                               "with `dpaudit evaluate`") from e


def empirical(claimed: float, best: TestRow | None, ceiling: float, curve: TestRow | None = None) -> EmpiricalCheck:
    """The empirical check of a claim (``claimed`` = inf for a model without one). ``curve`` is a test row whose
    guesses reject the card's whole trade-off curve (f-DP, :mod:`dpaudit.audit.fdp`): an eps bound above the
    claim implies that rejection, so either one is the same test and needs no further correction."""
    lb = best.epsilon_lb if best else 0.0
    conf = best.family_confidence if best else None

    def check(status: str, reason: str) -> EmpiricalCheck:
        return EmpiricalCheck(status, lb, ceiling, conf, reason)

    if best is not None and lb > claimed:
        return check("violated", f"empirical lower bound {lb:.3g} ({best.attack}) exceeds the claimed epsilon "
                                 f"{claimed:.3g} at {conf:.0%} confidence")
    if curve is not None:
        return check("violated", f"the guesses of {curve.attack} ({curve.v} of {curve.r} right) reject "
                                 f"the privacy card's mechanism: its whole trade-off curve (f-DP), of which the "
                                 f"claimed epsilon {claimed:.3g} is one point, at {percent(curve.family_confidence)} "
                                 "confidence")
    if best is None or ceiling <= 0.0:
        return check("no-power", "the audit could give no bound at all: with these canaries even perfect guesses "
                                 "prove nothing (use more canaries, fewer repetitions or a smaller delta)")
    if ceiling < claimed:
        return check("underpowered", f"the audit could reach epsilon {ceiling:.3g} at most, below the claim "
                                     f"{claimed:.3g}, and found {lb:.3g} at {conf:.0%} ({best.attack}): it could "
                                     f"not have detected a violation between {ceiling:.3g} and the claim")
    return check("consistent", f"the audit could reach epsilon {ceiling:.3g}, at or above the claim {claimed:.3g}, "
                               f"and found {lb:.3g} at {conf:.0%} ({best.attack}): a test able to refute the claim "
                               "did not (how strong it is at the claim: the report's strength line)")


@dataclass(frozen=True)
class Grounds:
    """What a verdict rests on besides the card and its accounting, one typed value for every caller (the
    evaluation's evidence, the gate's re-derivation, PMixED's evaluation): ``best`` the best test of the claim,
    ``ceiling`` the largest bound any of the audit's tests could have given, ``record_best`` the best bound of the
    record-level family (group privacy's second claim), ``curve`` a test row that rejects the card's trade-off
    curve, ``mechanism`` and ``noise_checks`` the probe's mechanism checks and the white-box noise checks."""

    best: TestRow | None
    ceiling: float | None = None
    record_best: TestRow | None = None
    curve: TestRow | None = None
    mechanism: list[MechanismEvidence] | None = None
    noise_checks: list | None = None


def judge(card, acct: ClaimAccounting, grounds: Grounds, plan_entry: dict | None = None) -> Verdict:
    """The headline verdict, its reason, and both checks, from the card, its accounting check ``acct`` (the value
    :func:`dpaudit.claim.reaccount.reaccount` returns) and the audit's ``grounds``. An evaluation off the plan
    fixed before training (``plan_entry``, :mod:`dpaudit.canaries.plan`) keeps its headline but is marked
    exploratory.

    Returns:
        The frozen :class:`Verdict`; ``verdict.as_dict()`` is the report's ``verdict`` object.
    """
    g = grounds
    v = _headline(card, acct, g.best, g.ceiling, g.record_best, g.curve)
    failed = mechanism_failures(g.mechanism, g.noise_checks)
    if failed and card.is_private and v.status != "violated":
        weights_only = all(f.startswith("mechanism check 'weights'") for f in failed)  # the record is another model's
        head = ("the weights are not the ones the probe watched, so its evidence does not describe this model"
                if weights_only else "the code that ran is not the mechanism the card describes")
        v = replace(v, status="mechanism-mismatch", mechanism=tuple(failed), without_mechanism=v.status,
                    reason=f"{head}: {'; '.join(failed)} (the claim rests on that card; without it: {v.status}, "
                           f"{v.reason})")
    if plan_entry and plan_entry.get("status") == "off-plan":
        v = replace(v, off_plan=True, reason="EXPLORATORY, off the evaluation plan fixed before training ("
                                             + "; ".join(plan_entry["departures"]) + "): " + v.reason)
    return v


def record_claim(card) -> dict | None:
    """Group privacy's second claim (record level, ``extra.record_level``) of a user-level card, else None."""
    rl = (card.extra or {}).get("record_level") if card.is_private else None
    return rl if rl and card.claim.unit == "user" else None


def mechanism_failures(mechanism: list[MechanismEvidence] | None, noise_checks: list | None) -> list[str]:
    """One line per failed probe check (dpaudit/audit/mechanism_checks.py) and per noise shortfall of a white-box
    record (dpaudit/audit/noise_check.py): each says the run departs from its card."""
    out = [f"mechanism check '{c.check}' failed: {c.finding}" for e in mechanism or [] for c in e.failed()]
    out += [f"the {c['attack']} updates carry noise at most {c['upper']:.4g}, below the card's sigma "
            f"{c['noise_multiplier']:.4g}" for c in noise_checks or [] if c.get("status") == "below the card"]
    return out


def _headline(card, acct: ClaimAccounting, best: TestRow | None, ceiling: float | None, record_best: TestRow | None,
              curve: TestRow | None) -> Verdict:
    if ceiling is None:
        ceiling = best.ceiling if best else 0.0
    emp = empirical(card.claim.epsilon_value, best, ceiling, curve if card.is_private else None)
    accounting = AccountingCheck(acct.status, acct.reason, acct.lower_epsilon, acct.certified_epsilon)

    def verdict(status: str, reason: str, emp: EmpiricalCheck = emp) -> Verdict:
        return Verdict(status, reason, accounting, emp)

    if record_best is not None and record_best.epsilon_lb > card.extra["record_level"]["epsilon"]:
        emp = replace(emp, status="violated",
                      reason=f"record-level lower bound {record_best.epsilon_lb:.2f} exceeds the record-level claim "
                             f"{card.extra['record_level']['epsilon']:.3f} at {percent(record_best.family_confidence)} "
                             "confidence")
        return verdict("violated", emp.reason, emp)
    if not card.is_private:
        conf = f" at {percent(emp.confidence)} confidence" if emp.confidence else ""
        return verdict("no-claim", f"non-private model (no epsilon claimed); the audit proves epsilon >= "
                                   f"{emp.epsilon_lb:.2f}{conf} (ceiling {ceiling:.2f})")
    if emp.status == "violated":
        return verdict("violated", emp.reason)
    if accounting.status == "under-claim":
        return verdict("accounting-mismatch", accounting.reason or "")
    if accounting.status != "verified":
        return verdict("inconclusive", f"accounting unverifiable: {accounting.reason}")
    if emp.status == "no-power":
        return verdict("inconclusive", f"accounting verified, but {emp.reason}")
    # consistent or underpowered: the empirical check's own word, one meaning at both levels
    return verdict(emp.status, f"accounting verified ({accounting.reason}); empirical: {emp.reason}")
