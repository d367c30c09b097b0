"""The audit's rows as typed, frozen values: one test of the one-run audit (:class:`TestRow`), one mechanism
check (:class:`CheckRow`) and the checks of one watched optimizer (:class:`MechanismEvidence`).

The evaluation's audit step (dpaudit/audit/families.py) builds one :class:`TestRow` per test and delta; the judge
(dpaudit/claim/verdict.py) reads its fields; the report (dpaudit/report/build.py) serialises it once, with
:meth:`TestRow.to_dict`, into report.json's ``empirical`` rows (the schema's ``bound``); the mechanism checks (dpaudit/audit/mechanism_checks.py) likewise, into
``mechanism_checks``. No torch, no SciPy here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TestRow:
    """One test's result.

    Attributes:
        attack: the test's name (an attack, or a white-box canary set).
        tier: its tier of evidence (``dpaudit.options.TIERS``: outputs only, final weights, in-run).
        delta_kind: ``claimed`` (the claim's delta), ``zero`` or ``record_claim`` (group privacy's second claim).
        m, k_pos, k_neg, r, v: canaries, guesses fixed in advance (member, non-member, both) and right guesses.
        delta, confidence: the delta tested and the test's own (Bonferroni) confidence.
        epsilon_lb, ceiling: the f-DP bound and the largest bound these guesses could give.
        group_size: records per audit unit (the bound is divided by it).
        threshold_rule: how the guesses were fixed.
        steinke_epsilon_lb, steinke_ceiling: Steinke et al.'s bound of the same guesses, beside it.
        analysis: the f-DP analysis' name.
        gdp_mu_lb, gdp_epsilon_estimate: the Gaussian-DP reading (an estimate, never a verdict's).
        claim_curve_rejected: whether the guesses reject the card's whole trade-off curve (claim rows only).
        bonferroni_tests, family_confidence: the family's size and confidence.
        statistic: the white-box statistic (white-box rows only).
    """

    __test__ = False  # not a pytest class, whatever its name

    attack: str
    tier: str
    delta_kind: str
    m: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    confidence: float
    epsilon_lb: float
    ceiling: float
    group_size: int
    threshold_rule: str
    steinke_epsilon_lb: float
    steinke_ceiling: float
    analysis: str
    gdp_mu_lb: float | None
    gdp_epsilon_estimate: float | None
    claim_curve_rejected: bool | None
    bonferroni_tests: int
    family_confidence: float
    statistic: str | None = None

    method: str = "one_run"
    kind: str = "lower bound"

    def to_dict(self) -> dict:
        """The report.json row (the schema's ``bound``): every field, ``statistic`` only where there is one."""
        d = asdict(self)
        if d["statistic"] is None:
            del d["statistic"]
        head = {"method": d.pop("method"), "attack": d.pop("attack"), "tier": d.pop("tier"),
                "delta_kind": d.pop("delta_kind")}
        return {**head, **d}


    @classmethod
    def from_dict(cls, d: dict) -> TestRow:
        """A report.json row read back (the gate re-derives the verdict from them). Rows of older reports lack
        some fields: the tier is derived from the test's name, the Steinke et al. numbers fall back to the row's
        own bound and ceiling."""
        from dpaudit.options import evidence_tier

        lb, cap = float(d["epsilon_lb"]), float(d["ceiling"])
        return cls(attack=str(d.get("attack", "audit")), tier=d.get("tier") or evidence_tier(str(d.get("attack", ""))),
                   delta_kind=d["delta_kind"], m=int(d.get("m", 0)), k_pos=int(d.get("k_pos", 0)),
                   k_neg=int(d.get("k_neg", 0)), r=int(d.get("r", 0)), v=int(d.get("v", 0)),
                   delta=float(d.get("delta", 0.0)), confidence=float(d.get("confidence", d["family_confidence"])),
                   epsilon_lb=lb, ceiling=cap, group_size=int(d.get("group_size", 1)),
                   threshold_rule=str(d.get("threshold_rule", "")),
                   steinke_epsilon_lb=float(d.get("steinke_epsilon_lb", lb)),
                   steinke_ceiling=float(d.get("steinke_ceiling", cap)), analysis=str(d.get("analysis", "")),
                   gdp_mu_lb=d.get("gdp_mu_lb"), gdp_epsilon_estimate=d.get("gdp_epsilon_estimate"),
                   claim_curve_rejected=d.get("claim_curve_rejected"), bonferroni_tests=int(d.get("bonferroni_tests", 1)),
                   family_confidence=float(d["family_confidence"]), statistic=d.get("statistic"))


def serialise(rows) -> list[dict]:
    """Rows as report.json holds them."""
    return [r.to_dict() for r in rows]


@dataclass(frozen=True)
class CheckRow:
    """One mechanism check's outcome (dpaudit/audit/mechanism_checks.py, or a registered check).

    Attributes:
        check: the check's name (``dpaudit.audit.check_registry.names()``).
        status: ``pass | fail | not tested`` (``dpaudit.options.CHECK_STATUSES``).
        finding: what was seen, in words.
        false_alarm: the rate at which an honest run fails it (0: deterministic; None: not tested).
        values: the numbers the finding rests on.
    """

    check: str
    status: str
    finding: str
    false_alarm: float | None
    values: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        from dpaudit.options import CHECK_STATUSES

        if self.status not in CHECK_STATUSES:
            raise ValueError(f"mechanism check status {self.status!r} is not one of {', '.join(CHECK_STATUSES)}")

    def as_dict(self) -> dict:
        """report.json's check row (a fresh plain dict)."""
        return {"check": self.check, "status": self.status, "finding": self.finding,
                "false_alarm": self.false_alarm, "values": dict(self.values)}


@dataclass(frozen=True)
class MechanismEvidence:
    """The mechanism checks of one optimizer the probe watched (dpaudit/probe/readback.py).

    Attributes:
        attack: the white-box canary set its readings came from.
        mode, coordinates, optimizer, world_size: how the probe watched (from its record).
        bound_to_card: whether the record is the run the card names.
        false_alarm_each: each statistical check's false-alarm rate.
        checks: the checks' rows, shipped then registered.
    """

    attack: str
    mode: str | None
    coordinates: str | None
    optimizer: str | None
    world_size: int | None
    bound_to_card: bool
    false_alarm_each: float
    checks: tuple[CheckRow, ...]

    @classmethod
    def from_dict(cls, d: dict) -> MechanismEvidence:
        """report.json's ``mechanism_checks`` entry as the typed value (KeyError, TypeError, ValueError: not one
        :meth:`as_dict` writes)."""
        return cls(d["attack"], d["mode"], d["coordinates"], d["optimizer"], d["world_size"], d["bound_to_card"],
                   d["false_alarm_each"], tuple(CheckRow(**c) for c in d["checks"]))

    def failed(self) -> tuple[CheckRow, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def as_dict(self) -> dict:
        """report.json's ``mechanism_checks`` entry (the one place it is serialised)."""
        return {"attack": self.attack, "mode": self.mode, "coordinates": self.coordinates,
                "optimizer": self.optimizer, "world_size": self.world_size, "bound_to_card": self.bound_to_card,
                "false_alarm_each": self.false_alarm_each, "checks": [c.as_dict() for c in self.checks]}
