"""The accounting check of a claim, from accountants' intervals (pure Python: ``dpaudit check`` uses it).

Every accountant that analyses the stated mechanism gives an upper value of its true epsilon, and some a
lower value (PRV's error bounds, PLD's optimistic discretisation). The check then says

* ``verified``: some sound upper value (at the claim's delta or a smaller one, under the claim's
  neighbouring relation) is at or below the claim, within the numerical tolerance;
* ``under-claim``: a lower value (at the claim's delta or a larger one) exceeds the claim beyond the
  tolerance: the true epsilon of the stated mechanism is larger than claimed;
* ``unverifiable``: neither (the claim lies inside the accountants' interval, no accountant analyses the
  mechanism, or the card describes it inconsistently).

An honest claim is never called an under-claim: the lower values are at or below the true epsilon, and a
claim from any sound accountant is at or above it. The tolerance rule is :func:`dpaudit.options.exceeds`,
shared with the CI gate.
"""

from __future__ import annotations

from dpaudit import options
from dpaudit.markup import probability

_REL = 1e-9  # deltas equal up to float noise


def interval(results: list[dict], delta: float, relation: str) -> tuple[dict | None, dict | None]:
    """(the result with the largest valid lower value, the one with the smallest sound upper value)."""
    same = [r for r in results if r.get("relation", "add_remove") == relation]
    lowers = [r for r in same if r.get("lower") is not None and r["delta"] >= delta * (1 - _REL)]
    uppers = [r for r in same if r.get("epsilon") is not None and r["delta"] <= delta * (1 + _REL)]  # None: lower only
    return (max(lowers, key=lambda r: r["lower"]) if lowers else None,
            min(uppers, key=lambda r: r["epsilon"]) if uppers else None)


def status(claimed: float, delta: float, relation: str, results: list[dict], findings: list[str],
           not_applicable: dict | None = None, tolerance: float = options.ACCOUNTING_TOLERANCE) -> dict:
    """{status, reason, lower, upper}: the accounting check of an (epsilon, delta) claim."""
    lo, hi = interval(results, delta, relation)
    out = {"lower": lo["lower"] if lo else None, "upper": hi["epsilon"] if hi else None}
    if lo is not None and options.exceeds(lo["lower"], claimed, tolerance):
        return {"status": "under-claim", **out,
                "reason": f"claimed epsilon {claimed:.4g} is below {lo['lower']:.4g}, a lower value of the true "
                          f"epsilon of the stated mechanism ({lo['accountant']}, {lo.get('detail') or 'lower bound'}; "
                          f"tolerance {tolerance:.0%})"}
    if findings:
        return {"status": "unverifiable", **out, "reason": findings[0]}
    if hi is not None and not options.exceeds(hi["epsilon"], claimed, tolerance):
        slack = "" if hi["epsilon"] <= claimed else f" (within the {tolerance:.0%} numerical tolerance)"
        return {"status": "verified", **out,
                "reason": f"{hi['accountant']} proves epsilon <= {hi['epsilon']:.4g} at delta {probability(hi['delta'], 3)}, "
                          f"at or below the claim {claimed:.4g}{slack}"}
    if hi is None:
        why = "; ".join(f"{k}: {v}" for k, v in (not_applicable or {}).items()) or "no results"
        return {"status": "unverifiable", **out,
                "reason": f"no accountant analyses this mechanism under {relation} neighbours ({why})"}
    lower = f"{lo['lower']:.4g}" if lo else "unknown"
    return {"status": "unverifiable", **out,
            "reason": f"the accountants place the true epsilon in [{lower}, {hi['epsilon']:.4g}]; the claim "
                      f"{claimed:.4g} is inside: neither proven nor refuted"}
