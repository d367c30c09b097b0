"""The evaluation plan: the audit's free choices, fixed in the canary manifest before training.

Which attacks are audited, how the one-run audit's choices are made (``rule``), at what confidence, and how
many reference secrets rank exposure: chosen at evaluation time, a user could re-run until a verdict suits
them. ``dpaudit run`` (and ``dpaudit canaries new``) write them into ``canaries.json`` (``audit_plan.evaluation``)
before any training; ``dpaudit evaluate`` then takes them from there. A setting passed explicitly that differs
from the plan is refused, unless the caller says ``off_plan``: the report then lists every departure, the
headline says the evaluation is exploratory, and ``dpaudit check`` fails it. A manifest written before plans
existed has none: its report says the choices were made at evaluation time.

No torch here.
"""

from __future__ import annotations

from dpaudit import checks, options
from dpaudit.errors import DpauditError

DEFAULTS = {"attacks": list(options.OUTPUT_ATTACKS), "rule": "bonferroni", "confidence": 0.95, "n_references": 2000}


def default_attacks(canary_plan=None) -> list[str]:
    """The attacks a plan takes when none are named: every outputs-only attack, plus the final-weights score when
    the canaries own zero-initialised rows (the final-weights design, docs/canary_designs.md), chosen from the
    canary plan alone, before any score exists. Exposure ranks a secret among the design's randomness space, so
    it joins only a design that has one (new-token canaries do not: each secret is its own tokens)."""
    out = list(options.OUTPUT_ATTACKS)
    if canary_plan is not None and canary_plan.space_size is None:
        out.remove("exposure")
    if canary_plan is not None and canary_plan.owns_rows and canary_plan.init == "zero":
        out.append("final_weights")
    return out
FLAGS = {"attacks": "--attacks", "rule": "--rule", "confidence": "--confidence", "n_references": "--references"}


def planned(attacks, rule: str, confidence: float, n_references: int) -> dict:
    """The plan to write into a manifest (validated as an evaluation would be)."""
    plan = {"attacks": _canonical(attacks), "rule": rule, "confidence": float(confidence),
            "n_references": int(n_references)}
    check(plan, "the evaluation plan")
    return plan


def check(plan: dict, source: str) -> None:
    """Refuse a plan whose settings an evaluation would refuse (the bounds of :func:`dpaudit.checks.evaluation_settings`,
    which the evaluation's options check too)."""
    if not isinstance(plan.get("attacks"), list) or not plan["attacks"]:
        raise DpauditError(f"{source}: attacks must be a non-empty list of {', '.join(options.attack_names())}")
    if plan.get("score_on", "record") not in options.SCORE_ON:
        raise DpauditError(f"{source}: score_on must be one of {', '.join(options.SCORE_ON)}, got {plan['score_on']!r}")
    for key in ("rule", "confidence", "n_references"):
        if plan.get(key) is None:
            raise DpauditError(f"{source}: {key} is missing")
    try:
        checks.evaluation_settings(tuple(plan["attacks"]), plan["rule"], plan["confidence"], plan["n_references"])
    except DpauditError as e:
        raise DpauditError(f"{source}: {e}") from None


def with_departure(entry: dict, departure: str | None) -> dict:
    """The report's ``audit_plan`` entry with one more departure (off-plan from now on); unchanged for None."""
    if not departure:
        return entry
    return {**entry, "status": "off-plan", "departures": [*entry.get("departures", []), departure]}


def resolve(plan: dict | None, off_plan: bool = False, **given) -> tuple[dict, dict]:
    """(the settings to use, the report's ``audit_plan`` entry). ``given`` holds attacks, rule, confidence and
    n_references as the caller passed them (None = not passed: take the plan's, or the default)."""
    base = plan or DEFAULTS
    used = {k: (given.get(k) if given.get(k) is not None else base[k]) for k in DEFAULTS}
    used["attacks"] = _canonical(used["attacks"])  # one order, whoever asks: the report's rows do not depend on it
    if plan is None:
        return used, {"status": "unplanned", "planned": None, "used": _norm(used), "departures": [],
                      "note": "the manifest fixes no evaluation plan: attacks, rule, confidence and references were "
                              "chosen at evaluation time"}
    departures = [f"{k}: planned {_show(plan[k])}, used {_show(_norm(used)[k])}" for k in DEFAULTS
                  if _norm(used)[k] != _norm(plan)[k]]
    if departures and not off_plan:
        k = next(k for k in DEFAULTS if _norm(used)[k] != _norm(plan)[k])
        raise DpauditError(f"this evaluation departs from the plan fixed in canaries.json before training "
                           f"({departures[0]}); drop {FLAGS[k]} ({k}= in the Python API) to use the plan, or pass "
                           "--off-plan (off_plan=True) to mark the report exploratory")
    return used, {"status": "off-plan" if departures else "as planned", "planned": _norm(plan),
                  "used": _norm(used), "departures": departures}


def _canonical(attacks) -> list[str]:
    """The attacks in dpaudit.options.attack_names() order (unknown names kept at the end, for the error that
    follows)."""
    given = list(dict.fromkeys(attacks))
    known = options.attack_names()
    return [a for a in known if a in given] + [a for a in given if a not in known]


def _norm(s: dict) -> dict:
    return {"attacks": _canonical(s["attacks"]), "rule": s["rule"], "confidence": float(s["confidence"]),
            "n_references": int(s["n_references"])}


def _show(v) -> str:
    return ",".join(v) if isinstance(v, list) else str(v)
