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

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dpaudit.audit.rows import TestRow


@dataclass(frozen=True)
class Verdict:
    """The judge step's value: :func:`judge`'s verdict (the report's ``verdict`` object), frozen all the way down
    (mappings read-only, lists as tuples); ``status`` and ``reason`` read from it, :meth:`as_dict` gives a
    plain copy to render."""

    fields: Mapping

    @classmethod
    def of(cls, verdict: dict) -> Verdict:
        return cls(_freeze(verdict))

    @property
    def status(self) -> str:
        return self.fields["status"]

    @property
    def reason(self) -> str:
        return self.fields["reason"]

    def as_dict(self) -> dict:
        return _thaw(self.fields)


def _freeze(x):
    if isinstance(x, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _thaw(x):
    if isinstance(x, Mapping):
        return {k: _thaw(v) for k, v in x.items()}
    if isinstance(x, tuple):
        return [_thaw(v) for v in x]
    return x


def empirical(claimed: float, best: TestRow | None, ceiling: float, curve: TestRow | None = None) -> dict:
    """The empirical check of a claim (``claimed`` = inf for a model without one). ``curve`` is a test row whose
    guesses reject the card's whole trade-off curve (f-DP, :mod:`dpaudit.audit.fdp`): an eps bound above the
    claim implies that rejection, so either one is the same test and needs no further correction."""
    lb = best.epsilon_lb if best else 0.0
    conf = best.family_confidence if best else None
    base = {"epsilon_lb": lb, "ceiling": ceiling, "confidence": conf}
    if best is not None and lb > claimed:
        return {"status": "violated", **base,
                "reason": f"empirical lower bound {lb:.3g} ({best.attack}) exceeds the claimed epsilon "
                          f"{claimed:.3g} at {conf:.0%} confidence"}
    if curve is not None:
        return {"status": "violated", **base,
                "reason": f"the guesses of {curve.attack} ({curve.v} of {curve.r} right) reject "
                          f"the privacy card's mechanism: its whole trade-off curve (f-DP), of which the claimed "
                          f"epsilon {claimed:.3g} is one point, at {curve.family_confidence:.0%} confidence"}
    if best is None or ceiling <= 0.0:
        return {"status": "no-power", **base,
                "reason": "the audit could give no bound at all: with these canaries even perfect guesses prove "
                          "nothing (use more canaries, fewer repetitions or a smaller delta)"}
    if ceiling < claimed:
        return {"status": "underpowered", **base,
                "reason": f"the audit could reach epsilon {ceiling:.3g} at most, below the claim {claimed:.3g}, and "
                          f"found {lb:.3g} at {conf:.0%} ({best.attack}): it could not have detected a violation "
                          f"between {ceiling:.3g} and the claim"}
    return {"status": "consistent", **base,
            "reason": f"the audit could reach epsilon {ceiling:.3g}, at or above the claim {claimed:.3g}, and found "
                      f"{lb:.3g} at {conf:.0%} ({best.attack}): a test able to refute the claim did not "
                      "(how strong it is at the claim: the report's strength line)"}


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
    mechanism: list | None = None
    noise_checks: list | None = None


def judge(card, acct: dict, grounds: Grounds, plan_entry: dict | None = None) -> dict:
    """The headline verdict, its reason, and both checks, from the card, its accounting check ``acct`` and the
    audit's ``grounds``. An evaluation off the plan fixed before training (``plan_entry``,
    :mod:`dpaudit.canaries.plan`) keeps its headline but is marked exploratory."""
    g = grounds
    v = _headline(card, acct, g.best, g.ceiling, g.record_best, g.curve)
    failed = mechanism_failures(g.mechanism, g.noise_checks)
    if failed and card.is_private and v["status"] != "violated":
        v = {**v, "status": "mechanism-mismatch", "mechanism": failed,
             "reason": f"the code that ran is not the mechanism the card describes: {'; '.join(failed)} (the claim rests "
                       f"on that card; without it: {v['status']}, {v['reason']})", "without_mechanism": v["status"]}
    if plan_entry and plan_entry.get("status") == "off-plan":
        v = {**v, "off_plan": True, "reason": "EXPLORATORY, off the evaluation plan fixed before training ("
                                              + "; ".join(plan_entry["departures"]) + "): " + v["reason"]}
    return v


def record_claim(card) -> dict | None:
    """Group privacy's second claim (record level, ``extra.record_level``) of a user-level card, else None."""
    rl = (card.extra or {}).get("record_level") if card.is_private else None
    return rl if rl and card.claim.unit == "user" else None


def mechanism_failures(mechanism: list | None, noise_checks: list | None) -> list[str]:
    """One line per failed probe check (dpaudit/audit/mechanism_checks.py) and per noise shortfall of a white-box
    record (dpaudit/audit/noise_check.py): each says the run departs from its card."""
    out = [f"mechanism check '{c['check']}' failed: {c['finding']}" for e in mechanism or [] for c in e["checks"]
           if c["status"] == "fail"]
    out += [f"the {c['attack']} updates carry noise at most {c['upper']:.4g}, below the card's sigma "
            f"{c['noise_multiplier']:.4g}" for c in noise_checks or [] if c.get("status") == "below the card"]
    return out


def _headline(card, acct: dict, best: TestRow | None, ceiling: float | None, record_best: TestRow | None,
              curve: TestRow | None) -> dict:
    if ceiling is None:
        ceiling = best.ceiling if best else 0.0
    emp = empirical(card.claim.epsilon_value, best, ceiling, curve if card.is_private else None)
    accounting = {k: acct.get(k) for k in ("status", "reason")} | {"lower": acct.get("lower_epsilon"),
                                                                    "upper": acct.get("certified_epsilon")}
    checks = {"accounting": accounting, "empirical": emp}
    if record_best is not None and record_best.epsilon_lb > card.extra["record_level"]["epsilon"]:
        emp = {**emp, "status": "violated",
               "reason": f"record-level lower bound {record_best.epsilon_lb:.2f} exceeds the record-level claim "
                         f"{card.extra['record_level']['epsilon']:.3f} at {record_best.family_confidence:.0%} "
                         "confidence"}
        return {"status": "violated", "reason": emp["reason"], **checks, "empirical": emp}
    if not card.is_private:
        conf = f" at {emp['confidence']:.0%} confidence" if emp["confidence"] else ""
        return {"status": "no-claim", **checks,
                "reason": f"non-private model (no epsilon claimed); the audit proves epsilon >= {emp['epsilon_lb']:.2f}"
                          f"{conf} (ceiling {ceiling:.2f})"}
    if emp["status"] == "violated":
        return {"status": "violated", "reason": emp["reason"], **checks}
    if accounting["status"] == "under-claim":
        return {"status": "accounting-mismatch", "reason": accounting["reason"], **checks}
    if accounting["status"] != "verified":
        return {"status": "inconclusive", "reason": f"accounting unverifiable: {accounting['reason']}", **checks}
    if emp["status"] == "no-power":
        return {"status": "inconclusive", "reason": f"accounting verified, but {emp['reason']}", **checks}
    head = emp["status"]  # consistent or underpowered: the empirical check's own word, one meaning at both levels
    return {"status": head, "reason": f"accounting verified ({accounting['reason']}); empirical: {emp['reason']}",
            **checks}
