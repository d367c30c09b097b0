"""The one-run bounds as they were before they were made fast (dpaudit/audit/one_run.py and fdp.py at commit
90257e0), and the two-sample plan's simulated audits as they were before a792923: the baselines
benchmarks/bench_audit_speed.py times in the same run. Not used by dpaudit itself."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import binom

from dpaudit.audit import fdp


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    if v <= 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(binom.sf(v - 1, r, q))
    if delta <= 0.0:
        return min(1.0, beta)
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, q)
    cumsum = np.cumsum(pmf)
    alpha = float(np.max(cumsum / np.arange(1, v + 1)))
    return min(1.0, beta + alpha * delta * 2 * m)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95,
                        iters: int = 60) -> float:
    alpha = 1.0 - confidence
    if r == 0 or p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < alpha:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:
            return lo
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if p_value(m, r, v, mid, delta) < alpha:
            lo = mid
        else:
            hi = mid
    return lo


def rejects(finv, m: int, r: int, v: int, confidence: float = 0.95, k: int = 2) -> np.ndarray:
    n = np.asarray(finv(np.zeros(1))).size
    if r == 0:
        return np.zeros(n, dtype=bool)
    tau = 1.0 - confidence
    thr = tau * r / m
    rr = np.full(n, thr * v / r)
    h = np.full(n, thr * (r - v) / r)
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, (k - 1) * np.asarray(finv(rr)))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h > r / m + 1e-12


def _largest_rejected(grid, finv_of, m, r, v, confidence, points=128) -> float:
    lo, hi, best = 0, len(grid), -1
    while lo < hi:
        idx = np.unique(np.linspace(lo, hi - 1, min(points, hi - lo)).round().astype(int))
        rej = rejects(finv_of(grid[idx]), m, r, v, confidence)
        if rej.any():
            best = int(idx[rej].max())
        above = idx[~rej & (idx > best)]
        lo, hi = best + 1, int(above.min()) if above.size else hi
    return float(grid[best]) if best >= 0 else 0.0


def approx_dp_finv(epsilons, delta: float):
    e = np.exp(np.asarray(epsilons, dtype=float))

    def finv(y):
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)
        return np.clip(np.maximum((y - delta) / e, 1.0 - delta - e * (1.0 - y)), 0.0, 1.0)

    return finv


def approx_dp_epsilon_lower_bound(m, r, v, delta, confidence=0.95) -> float:
    if r == 0:
        return 0.0
    return _largest_rejected(fdp.EPS_GRID, lambda eps: approx_dp_finv(eps, delta), m, r, v, confidence)


def gdp_mu_lower_bound(m, r, v, confidence=0.95) -> float:
    if r == 0:
        return 0.0
    return _largest_rejected(fdp.MU_GRID, fdp.gdp_finv, m, r, v, confidence)


def two_sample_plan_rows(q, s, T, n_in, n_out, delta, confidence, seed, pool) -> list:
    """dpaudit.audit.two_sample._plan_rows before it read each count's Clopper-Pearson bound once: every one of the
    2,001 simulated audits per FPR through ``epsilon_from_counts`` (two SciPy beta calls each). Over 8 parameters:
    _plan_rows' own."""
    from dpaudit.audit import two_sample as ts

    held_out, ins = ts._card_pools(q, s, T, seed, pool)
    rng = np.random.default_rng([seed, 2030])
    rows = []
    for f in ts.FPR_GRID:
        if f * pool < ts.MIN_TAIL:
            continue
        t = float(np.quantile(held_out, 1.0 - f))
        p1, p0 = float(np.mean(ins > t)), float(np.mean(held_out > t))
        tps, fps = rng.binomial(n_in, p1, ts.PLAN_DRAWS), rng.binomial(n_out, p0, ts.PLAN_DRAWS)
        b = np.median([ts.epsilon_from_counts(int(a), n_in, int(c), n_out, delta, confidence) for a, c in zip(tps, fps)])
        rows.append({"fpr": f, "threshold": t, "tpr": p1, "median_epsilon_lb": float(b)})
    return rows
