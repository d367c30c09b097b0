"""The noise search's one primitive: bisection's answer on a monotone value, in fewer evaluations of it.

Calibrating σ bisects "ε(σ) > target" down to a tolerance; each step is a whole accountant pass (a PLD or PRV
composition: 0.1-1 s), and bisection needs about log2(width / tol) of them (9 for the usual [0.6σ, σ] at 1e-3).
:func:`threshold` returns **the same float** as :func:`bisect` wherever ε falls as σ grows (every shipped accountant):
it runs the same bisection with a stand-in for each answer (what the values already computed imply, else which side
of an interpolated guess the point lies), then computes the two ends of the interval it ends on. Where both agree
with the stand-in, every answer on the path agreed too (each midpoint became one of the two ends or lies beyond
them), so the path, its arithmetic and its result are bisection's own; where one disagrees, that value joins the
known ones and the search runs again. Typical cost: about half of bisection's passes (bench_calibration.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable


def bisect(too_small: Callable[[float], bool], lo: float, hi: float, tol: float) -> float:
    """Given too_small(lo) and not too_small(hi), shrink to width tol; returns the safe (upper) end."""
    return _path(too_small, lo, hi, tol)[1]


def _path(too_small: Callable[[float], bool], lo: float, hi: float, tol: float) -> tuple[float, float]:
    """Bisection's final interval (lo, hi)."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if too_small(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def threshold(value: Callable[[float], float], target: float, lo: float, hi: float, tol: float,
              known: dict[float, float] | None = None) -> float:
    """``bisect(lambda s: value(s) > target, lo, hi, tol)``, the same float where ``value`` falls as ``s`` grows, in
    fewer calls of ``value``.

    Args:
        value: the quantity that falls as ``s`` grows (ε of a noise multiplier); ``inf`` where it cannot be
            computed (such an ``s`` is too small).
        target: the largest acceptable value.
        lo: an ``s`` known too small (value > target), as :func:`bisect` assumes.
        hi: an ``s`` taken as large enough (value <= target), as :func:`bisect` assumes (its value is computed
            once, to place the first guess; the answer is ``hi`` itself where it is not below the target).
        tol: the width at which the search stops.
        known: values already computed, by ``s`` (used, never recomputed).

    Returns:
        The upper end of the final interval: the smallest ``s`` on bisection's grid that is large enough.
    """
    seen = dict(known or {})

    def real(s: float) -> float:
        if s not in seen:
            seen[s] = value(s)
        return seen[s]

    real(hi)  # the two ends' values place the first guess (bisection needs neither)
    for _ in range(64):  # each round computes at least one new value; bisection's own path is about 10 deep
        guess = _guess(seen, target, lo, hi)

        def stand_in(s: float, guess: float = guess) -> bool:
            if any(v > target and k >= s for k, v in seen.items()):
                return True  # a larger s is too small: so is this one
            if any(v <= target and k <= s for k, v in seen.items()):
                return False
            return s < guess

        a, b = _path(stand_in, lo, hi, tol)
        # b first: where b is too small so is a, and the round ends on one value
        if (b == hi or real(b) <= target) and (a == lo or real(a) > target):
            return b
    return bisect(lambda s: real(s) > target, lo, hi, tol)  # not reached for a monotone value


def _guess(seen: dict[float, float], target: float, lo: float, hi: float) -> float:
    """Where ``value`` crosses ``target``: the secant of log ε against log s through the two finite values nearest
    the target (ε of the Gaussian mechanism falls about as 1/σ), kept inside what is known; the midpoint of what is
    known where no such secant exists."""
    left = max([k for k, v in seen.items() if v > target] + [lo])  # the largest s known too small
    right = min([k for k, v in seen.items() if v <= target] + [hi])
    pts = sorted(((abs(math.log(v / target)), k, v) for k, v in seen.items() if k > 0 and 0 < v < math.inf))
    if len(pts) >= 2:
        (_, k1, v1), (_, k2, v2) = pts[:2]
        if k1 != k2 and v1 != v2:
            slope = (math.log(v2) - math.log(v1)) / (math.log(k2) - math.log(k1))
            if slope < 0:
                s = math.exp(math.log(k1) + (math.log(target) - math.log(v1)) / slope)
                if left < s < right:
                    return s
    return 0.5 * (left + right)
