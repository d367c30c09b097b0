"""Step 3 of ``dpaudit evaluate``: compare claimed, re-accounted and empirical epsilon and say which check
found what: consistent | violated | accounting-mismatch | inconclusive | no-claim (dpaudit.options.VERDICTS).

The accounting check uses the one tolerance rule of :func:`dpaudit.options.exceeds` (the CI gate uses it
too); the empirical check can refute a claim only up to its ceiling, and the reason says so.
"""

from __future__ import annotations

from dpaudit import options


def judge(card, acct: dict, best: dict | None, ceiling: float | None = None, record_best: dict | None = None) -> dict:
    """The verdict with its reason in words. ``ceiling`` is the largest bound any of the audit's tests could
    have given; ``record_best`` the best bound of the record-level family (group privacy's second claim)."""
    if record_best is not None and record_best["epsilon_lb"] > card.extra["record_level"]["epsilon"]:
        return {"status": "violated",
                "reason": f"record-level lower bound {record_best['epsilon_lb']:.2f} exceeds the record-level "
                          f"claim {card.extra['record_level']['epsilon']:.3f} at "
                          f"{record_best['family_confidence']:.0%} confidence"}
    lb = best["epsilon_lb"] if best else 0.0
    if ceiling is None:
        ceiling = best["ceiling"] if best else 0.0
    conf = best["family_confidence"] if best else None
    if not card.is_private:
        return {"status": "no-claim",
                "reason": f"non-private model (no epsilon claimed); the audit proves epsilon >= {lb:.2f} "
                          f"at {conf:.0%} confidence (ceiling {ceiling:.2f})"}
    eps = card.claim.epsilon_value
    if lb > eps:
        return {"status": "violated",
                "reason": f"empirical lower bound {lb:.2f} exceeds the claimed epsilon {eps:.2f} "
                          f"at {conf:.0%} confidence"}
    cert = acct["certified_epsilon"]
    if cert is not None and options.exceeds(cert, eps, acct["tolerance"]):
        return {"status": "accounting-mismatch",
                "reason": f"claimed epsilon {eps:.3f} is below every accountant's value (smallest {cert:.3f})"}
    if acct["findings"]:
        return {"status": "accounting-mismatch", "reason": acct["findings"][0]}
    if best is not None and ceiling <= 0.0:
        return {"status": "inconclusive",
                "reason": f"accountants re-derive epsilon <= {acct['reaccounted_epsilon']:.2f} (claim {eps:.2f}), but the "
                          f"empirical audit has no power: with m = {best['m']} canaries at delta = {best['delta']:.3g} even "
                          "perfect guesses give no bound (use more canaries, fewer repetitions or a smaller delta)"}
    return {"status": "consistent",
            "reason": f"accountants re-derive epsilon <= {acct['reaccounted_epsilon']:.2f} (claim {eps:.2f}) and the "
                      f"empirical lower bound {lb:.2f} does not exceed the claim; this audit cannot detect "
                      f"violations above its ceiling {ceiling:.2f}"}
