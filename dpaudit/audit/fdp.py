"""One-run audit through f-DP (Mahloujifar, Melis, Chaudhuri 2024, "Auditing f-Differential Privacy in One Run").

Same game as :mod:`dpaudit.audit.one_run`: m canaries, each inserted with probability 1/2; the auditor makes
r guesses fixed in advance (the k_pos highest scores "in", the k_neg lowest "out") and v of them are right.
Instead of a binomial model with e^eps / (1 + e^eps), the analysis uses the hypothesised mechanism's whole
trade-off curve f (type II error as a function of type I error) through its *inverse blow-up*
``finv(y) = b^-1(y)``, ``b(x) = 1 - f(x)``. Given a level tau = 1 - confidence it runs, for j = v .. 0,

    thr = tau r / m;   rr[v] = thr v / r;   h[v] = thr (r - v) / r
    h[i]  = max(h[i+1], (k - 1) finv(rr[i+1]))
    rr[i] = rr[i+1] + i / (r - i) (h[i] - h[i+1])

and the hypothesis "the mechanism is f-DP" is **rejected** at level tau when rr[0] + h[0] > r / m (the
adversary could not have been right v times with probability tau without guessing more than it did).
k = 2 (membership). A rejected f also rejects every f' >= f pointwise (f'-DP implies f-DP), so in a family
ordered by privacy only the least private rejected member is reported.

Families (each a function of one parameter, least private at the top of its grid):

* ``approx_dp``: f_{eps,delta}, the weakest curve with (eps, delta)-DP. Rejecting it *is* rejecting the
  (eps, delta) claim: an assumption-free lower bound on eps at that delta, comparable to the claim.
* ``gdp``: mu-GDP, f(x) = Phi(Phi^-1(1 - x) - mu). Rejecting mu-GDP does not reject (eps(mu, delta), delta)-DP
  (a mechanism can be (eps, delta)-DP and not mu-GDP), so the eps read from mu is an **estimate** that assumes a
  Gaussian trade-off curve; it is never used in a verdict.
* :func:`rejects_profile`: the claim's own curve, the upper envelope of f_{eps, delta(eps)} over a privacy
  profile (eps_j, delta_j) from an accountant: a direct, assumption-free test of the whole claim.

Pure NumPy/SciPy. The recursion is vectorised over a grid of the family's parameter, so a bound costs r
vector operations; grid points are conservative (the bound is rounded down to the grid).

>>> round(gdp_mu_lower_bound(1000, 100, 100), 2)
1.22
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr, ndtri

from dpaudit.audit import fdp_pieces
from dpaudit.audit.many_run import gdp_epsilon
from dpaudit.audit.one_run import _check_counts

MU_GRID = np.round(np.arange(0.0, 12.0 + 1e-9, 0.002), 6)
EPS_GRID = np.round(np.arange(0.0, 25.0 + 1e-9, 0.002), 6)


def _check(m: int, r: int, v: int, confidence: float) -> None:
    _check_counts(m, r, v)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def rejects(finv, m: int, r: int, v: int, confidence: float = 0.95, k: int = 2) -> np.ndarray:
    """Whether v correct guesses out of r (m canaries) reject f-DP at level 1 - confidence, for each curve.

    ``finv(y)`` takes an array y of shape (n,) and returns the inverse blow-up of n curves at it (shape (n,)):
    the recursion runs once for all n hypotheses. Returns a boolean array of shape (n,).
    """
    n = np.asarray(finv(np.zeros(1))).size
    return _rejects(lambda idx: finv if idx is None else _subset(finv, idx, n), n, m, r, v, confidence, k)


def _subset(finv, idx: np.ndarray, n: int) -> Callable:
    """``finv`` restricted to the curves ``idx`` (by evaluating all n: for a finv that cannot be rebuilt)."""
    def sub(y):
        full = np.zeros(n)
        full[idx] = y
        return np.asarray(finv(full))[idx]

    return sub


def _rejects(finv_for, n: int, m: int, r: int, v: int, confidence: float, k: int = 2,
             every: int = 16) -> np.ndarray:
    """:func:`rejects` with the curves still undecided only: ``finv_for(idx)`` is the inverse blow-up of the
    curves ``idx`` (None: all n). Both sequences only grow (h[i] >= h[i+1], and rr with it), so a curve whose
    rr + h already exceeds r / m is rejected whatever follows, and one whose h did not move is at a fixed point
    (rr does not move either, so neither does anything after): every ``every`` steps both are set aside and the
    recursion goes on with the others, ending when none is left. Equal to running every curve to j = 0
    (tests/audit/test_bounds_grid.py holds the bounds to the values of the full recursion)."""
    _check(m, r, v, confidence)
    if r == 0:
        return np.zeros(n, dtype=bool)
    tau = 1.0 - confidence
    thr = tau * r / m
    limit = r / m + 1e-12
    out = np.zeros(n, dtype=bool)
    idx = np.arange(n)
    finv = finv_for(None)
    rr = np.full(n, thr * v / r)
    h = np.full(n, thr * (r - v) / r)
    moved = np.zeros(n, dtype=bool)
    for step, i in enumerate(range(v - 1, -1, -1), 1):
        f = np.asarray(finv(rr))
        h_new = np.maximum(h, f if k == 2 else (k - 1) * f)
        d = h_new - h
        moved |= d != 0
        rr = rr + (i / (r - i)) * d
        h = h_new
        if step % every == 0 and i > 0:
            over = rr + h > limit
            done = over | ~moved  # rejected for good, or at a fixed point for the last `every` steps
            if done.any():
                out[idx[over]] = True
                keep = ~done
                idx, rr, h = idx[keep], rr[keep], h[keep]
                if idx.size == 0:
                    return out
                finv = finv_for(idx)
            moved = np.zeros(idx.size, dtype=bool)
    out[idx] = rr + h > limit
    return out


# ---- families --------------------------------------------------------------------------------------------


def gdp_finv(mus) -> Callable:
    mus = np.asarray(mus, dtype=float)

    def finv(y):
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)
        return ndtr(ndtri(y) - mus)

    return finv


def approx_dp_finv(epsilons, delta: float) -> Callable:
    """Inverse blow-up of f_{eps,delta}(x) = max(0, 1 - delta - e^eps x, e^-eps (1 - delta - x))."""
    e = np.exp(np.asarray(epsilons, dtype=float))
    keep = 1.0 - delta

    def finv(y):  # clip(max((y - delta) / e, 1 - delta - e (1 - y)), 0, 1), the same operations without np.clip
        y = np.minimum(np.maximum(np.asarray(y, dtype=float), 0.0), 1.0)
        a = (y - delta) / e
        b = e * (1.0 - y)
        np.subtract(keep, b, out=b)
        np.maximum(a, b, out=a)
        np.maximum(a, 0.0, out=a)
        return np.minimum(a, 1.0, out=a)

    return finv


def profile_finv(epsilons, deltas) -> Callable:
    """Inverse blow-up of the curve max_j f_{eps_j, delta_j}: one hypothesis (the claim's privacy profile)."""
    e = np.exp(np.asarray(epsilons, dtype=float))
    d = np.asarray(deltas, dtype=float)

    def finv(y):
        y = np.clip(np.asarray(y, dtype=float), 0.0, 1.0)[:, None]
        return np.clip(np.maximum((y - d) / e, 1.0 - d - e * (1.0 - y)), 0.0, 1.0).max(axis=1)

    return finv


def _largest_rejected(grid: np.ndarray, finv_of, m: int, r: int, v: int, confidence: float,
                      points: int = 128) -> float:
    """The largest grid value whose curve the guesses reject (0 if none), by a search over the grid.

    Rejection is monotone along the grid: a curve of a smaller mu (or eps) is a stronger privacy guarantee, so
    when the guesses reject one they reject every smaller one. Each round tests ``points`` grid values at once
    (one recursion of :func:`rejects`, O(v) vectorised steps) and keeps the bracket between the last rejected and
    the first accepted value, so a 12,501-point grid takes two rounds instead of one recursion over all of it
    (10^5 guesses: seconds, not a minute). Equal to scanning the whole grid (tests/audit/test_fdp.py)."""
    lo, hi, best = 0, len(grid), -1  # the answer's index lies in [best, hi); lo..hi-1 are untested
    while lo < hi:
        idx = np.unique(np.linspace(lo, hi - 1, min(points, hi - lo)).round().astype(int))
        params = grid[idx]
        rej = _rejects(lambda sub, params=params: finv_of(params if sub is None else params[sub]), idx.size, m, r,
                       v, confidence)
        if rej.any():
            best = int(idx[rej].max())
        above = idx[~rej & (idx > best)]
        lo, hi = best + 1, int(above.min()) if above.size else hi
    return float(grid[best]) if best >= 0 else 0.0


@lru_cache(maxsize=4096)
def gdp_mu_lower_bound(m: int, r: int, v: int, confidence: float = 0.95) -> float:
    """Largest mu on the grid whose mu-GDP the guesses reject (0 if none)."""
    _check(m, r, v, confidence)
    if r == 0:
        return 0.0
    return _largest_rejected(MU_GRID, gdp_finv, m, r, v, confidence)


@lru_cache(maxsize=4096)
def approx_dp_epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest eps on the grid whose (eps, delta)-DP the guesses reject (0 if none): an assumption-free bound."""
    _check(m, r, v, confidence)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    if r == 0:
        return 0.0
    return fdp_pieces.epsilon_lower_bound(EPS_GRID, m, r, v, delta, confidence)  # the recursion in closed form


def rejects_profile(m: int, r: int, v: int, epsilons, deltas, confidence: float = 0.95) -> bool:
    """Whether the guesses reject the claim's own trade-off curve (its privacy profile eps_j -> delta_j)."""
    _check(m, r, v, confidence)
    if r == 0:
        return False
    return bool(rejects(profile_finv(epsilons, deltas), m, r, v, confidence)[0])


@dataclass(frozen=True)
class FdpResult:
    """What the f-DP analysis says of one set of guesses (the counts stay with the guesses,
    :class:`dpaudit.audit.one_run.OneRunResult`)."""

    epsilon_lb: float  # assumption-free: (eps, delta)-DP rejected for every eps below it
    ceiling: float  # the largest epsilon_lb these many guesses can ever give (all right)
    gdp_mu_lb: float
    gdp_epsilon_estimate: float | None  # assumes a Gaussian trade-off curve: an estimate, never a bound
    gdp_mu_ceiling: float
    analysis: str = "f-DP (Mahloujifar, Melis, Chaudhuri 2024)"

    def to_dict(self) -> dict:
        return asdict(self)


def audit(guesses_right: int, m: int, k_pos: int, k_neg: int, delta: float, confidence: float = 0.95,
          group_size: int = 1) -> FdpResult:
    """Both f-DP readings of one set of guesses (r = k_pos + k_neg, v right). With ``group_size`` c > 1 the eps
    values are divided by c (``delta`` must then be the group's), like :func:`dpaudit.audit.one_run.audit`."""
    r = int(k_pos + k_neg)
    v = int(guesses_right)
    _check(m, r, v, confidence)
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    m, delta, confidence = int(m), float(delta), float(confidence)
    lb = approx_dp_epsilon_lower_bound(m, r, v, delta, confidence)
    cap = approx_dp_epsilon_lower_bound(m, r, r, delta, confidence)
    mu = gdp_mu_lower_bound(m, r, v, confidence)
    mu_cap = gdp_mu_lower_bound(m, r, r, confidence)
    est = gdp_epsilon(mu, delta) / group_size if delta > 0 else None  # mu-GDP has no finite eps at delta = 0
    return FdpResult(epsilon_lb=lb / group_size, ceiling=cap / group_size, gdp_mu_lb=mu, gdp_epsilon_estimate=est,
                     gdp_mu_ceiling=mu_cap)


def gdp_mu_for(epsilon: float, delta: float) -> float:
    """The mu whose mu-GDP has exactly ``epsilon`` at ``delta``."""
    from scipy.optimize import brentq

    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got {epsilon}, {delta}")
    hi = 1.0
    while gdp_epsilon(hi, delta) < epsilon:
        hi *= 2.0
    return float(brentq(lambda u: gdp_epsilon(u, delta) - epsilon, 1e-6, hi, xtol=1e-9))


def ideal_limit(m: int, k_pos: int, k_neg: int, epsilon: float, delta: float, confidence: float = 0.95,
                sims: int = 1000, seed: int = 0) -> dict:
    """What the best possible one-run audit with these canaries and guesses shows about a mechanism of exactly
    the claimed (epsilon, delta): mu-GDP at the mu with that epsilon, each canary's score the optimal statistic
    (N(mu, 1) inserted, N(0, 1) held out), the same guesses and the same analysis; the median over ``sims``
    simulated audits (the bounds are monotone in the number right, so the median audit is the audit at the
    median count)."""
    mu = gdp_mu_for(epsilon, delta)
    rng = np.random.default_rng([seed, 2024])
    signs = rng.choice([-1, 1], size=(sims, m))
    sc = rng.normal(size=(sims, m)) + mu * (signs > 0)
    order = np.argsort(sc, axis=1, kind="stable")
    s_sorted = np.take_along_axis(signs, order, axis=1)
    right = (s_sorted[:, m - k_pos:] > 0).sum(axis=1) + (s_sorted[:, :k_neg] < 0).sum(axis=1)
    v = int(np.median(right))
    res = audit(v, m, k_pos, k_neg, delta, confidence)
    return {"mu": mu, "epsilon": float(epsilon), "delta": float(delta), "m": int(m), "k_pos": int(k_pos),
            "k_neg": int(k_neg), "median_right": v, "epsilon_lb": res.epsilon_lb,
            "gdp_epsilon_estimate": res.gdp_epsilon_estimate, "simulations": int(sims), "seed": int(seed),
            "confidence": float(confidence)}
