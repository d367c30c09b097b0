"""The f-DP one-run recursion for (eps, delta)-DP curves, solved in closed form on each linear piece.

:mod:`dpaudit.audit.fdp` runs Mahloujifar et al.'s recursion step by step (v Python steps per curve). For the
curve f_{eps,delta} the inverse blow-up is piecewise linear in y,

    finv(y) = clip(max((y - delta) / e^eps, 1 - delta - e^eps (1 - y)), 0, 1),   y clipped to [0, 1],

with at most four pieces (0; slope e^-eps; slope e^eps; constant past y = 1). After its first step the
recursion moves h to finv(rr) at every step (rr only grows and finv is non-decreasing, so the max never keeps
the old h again; if the first step does not move h, nothing ever moves). Writing x_s for rr after s steps and
c_s = i / (r - i) for step s (i = v - s), the increments obey

    x_s - x_{s-1} = c_s (finv(x_{s-1}) - finv(x_{s-2})) = c_s a (x_{s-1} - x_{s-2})

while x_{s-1} and x_{s-2} lie on one piece of slope a: a geometric-like product, so x over a whole piece is one
cumulative sum of exp(log increments), computed for all its steps at once. A step whose two points straddle a
breakpoint is taken one at a time with the exact finv. A curve therefore costs at most a handful of vector
operations instead of v Python steps, and the bound (the largest rejected grid value, rejection being monotone
in eps) a bisection of about 14 curves. Equal to the step-by-step recursion to float rounding: the bounds are
held to the committed grid of :mod:`tests.audit.test_bounds_grid` within 1e-9 and to the recursion curve by
curve in tests/audit/test_fdp_pieces.py.
"""

from __future__ import annotations

import math

import numpy as np


class _Steps:
    """What every curve of one (m, r, v, confidence) shares: the start, the limit and the log step factors."""

    def __init__(self, m: int, r: int, v: int, confidence: float):
        tau = 1.0 - confidence
        thr = tau * r / m
        self.v = v
        self.x0 = thr * v / r
        self.h0 = thr * (r - v) / r
        self.limit = r / m + 1e-12
        i = np.arange(v - 1, -1, -1, dtype=float)  # step s = 1..v has i = v - s
        self.c = i / (r - i)  # c[s - 1] is step s's factor
        with np.errstate(divide="ignore"):
            self.cum_log_c = np.concatenate(([0.0], np.cumsum(np.log(self.c))))  # [s] = sum of log c over steps 1..s


class _Curve:
    """finv of f_{eps,delta} as scalar arithmetic (the operations of :func:`dpaudit.audit.fdp.approx_dp_finv`),
    with its breakpoints and the slope of each piece."""

    def __init__(self, eps: float, delta: float):
        e = math.exp(eps)
        self.e, self.delta, self.keep = e, delta, 1.0 - delta
        points = [delta, 1.0 - (1.0 - delta) / e, 1.0]  # B = 0, C = 0, the clip of y at 1
        if e > 1.0:
            points.append((1.0 - delta - e + delta / e) / (1.0 / e - e))  # B = C: the kink
        self.breaks = sorted(p for p in points if 0.0 < p <= 1.0)

    def __call__(self, y: float) -> float:
        y = min(max(y, 0.0), 1.0)
        a = (y - self.delta) / self.e
        b = self.keep - self.e * (1.0 - y)
        return min(max(a, b, 0.0), 1.0)

    def piece(self, y: float) -> int:
        """Index of the piece holding y (a breakpoint belongs to the piece on its right)."""
        return sum(1 for p in self.breaks if y >= p)

    def upper(self, k: int) -> float:
        return self.breaks[k] if k < len(self.breaks) else math.inf

    def slope(self, k: int) -> float:
        """finv's slope on piece k, read from the formula at a point inside it."""
        lo = self.breaks[k - 1] if k > 0 else 0.0
        hi = self.upper(k)
        if lo >= 1.0:
            return 0.0
        y = 0.5 * (lo + min(hi, 1.0))
        a, b = (y - self.delta) / self.e, self.keep - self.e * (1.0 - y)
        top = max(a, b)
        if top <= 0.0 or top >= 1.0:
            return 0.0
        return 1.0 / self.e if a >= b else self.e


def rejects(steps: _Steps, curve: _Curve) -> bool:
    """Whether v right guesses out of r reject the curve: the recursion's rr_0 + h_0 > r / m."""
    return final(steps, curve) > steps.limit


def final(steps: _Steps, curve: _Curve, stop: float | None = None) -> float:
    """The recursion's rr_0 + h_0; once rr passes ``stop`` (default: the limit, past which the curve is rejected
    whatever follows) the value then reached is returned instead."""
    stop = steps.limit if stop is None else stop
    v = steps.v
    f0 = curve(steps.x0)
    if f0 <= steps.h0:  # the first step does not move h: a fixed point from the start
        return steps.x0 + steps.h0
    x_prev, x = steps.x0, steps.x0 + steps.c[0] * (f0 - steps.h0)
    s = 1  # steps done; x = x_s, x_prev = x_{s-1}
    while s < v:
        if x > stop:  # rr only grows and h >= 0: rejected whatever follows
            return x
        k = curve.piece(x)
        if k != curve.piece(x_prev):  # the next step's two points straddle a breakpoint: take it exactly
            x_prev, x = x, x + steps.c[s] * (curve(x) - curve(x_prev))
            s += 1
            continue
        a, d = curve.slope(k), x - x_prev
        if a == 0.0 or d <= 0.0:  # finv constant here, or x did not move: nothing moves again
            break
        t = np.arange(s + 1, v + 1)  # the steps left, all on this piece until x leaves it
        with np.errstate(over="ignore", invalid="ignore"):
            log_d = math.log(d) + (t - s) * math.log(a) + steps.cum_log_c[t] - steps.cum_log_c[s]
            xs = x + np.cumsum(np.exp(log_d))
        out = int(np.searchsorted(xs, curve.upper(k), side="left"))  # first step whose x leaves the piece
        if out >= xs.size:  # the piece holds every step left
            x_prev, x = (xs[-2] if xs.size > 1 else x), xs[-1]
            s = v
            break
        x_prev, x = (xs[out - 1] if out > 0 else x), xs[out]
        s += out + 1
    h = curve(x_prev) if s >= 2 else f0
    return x + h


def epsilon_lower_bound(grid: np.ndarray, m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """The largest eps on ``grid`` (increasing) whose (eps, delta)-DP the guesses reject (0 if none): a bisection
    over the grid's indices, rejection being monotone in eps (a smaller eps is a stronger claim)."""
    if r == 0 or v == 0:
        return 0.0
    steps = _Steps(m, r, v, confidence)
    lo, hi = -1, len(grid)  # grid[lo] rejected (or none), grid[hi] not (or past the end)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rejects(steps, _Curve(float(grid[mid]), delta)):
            lo = mid
        else:
            hi = mid
    return float(grid[lo]) if lo >= 0 else 0.0
