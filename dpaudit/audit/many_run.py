"""Many-run audits from a membership test's confusion counts (pure NumPy/SciPy).

* :func:`clopper_pearson_epsilon` (Jagielski, Ullman, Oprea 2020): one-sided Clopper-Pearson bounds on
  FPR (upper) and TPR (lower), each at level alpha/2 so that both hold jointly at 1 - alpha; then
  eps >= max(ln((TPR_lo - delta) / FPR_hi), ln((TNR_lo - delta) / FNR_hi)). A lower bound.
* :func:`gdp_mu_lower` and :func:`gdp_epsilon` (Nasr et al. 2023): the same CP bounds read through the
  Gaussian-DP trade-off curve, mu = Phi^-1(1 - FPR) - Phi^-1(FNR), then converted to (eps, delta).
  This assumes the mechanism is GDP-shaped: it is an **estimate**, never reported as a bound.

The threshold that produced the counts must have been chosen on other runs than these.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import beta, norm


def cp_lower(k: int, n: int, alpha: float) -> float:
    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


def cp_upper(k: int, n: int, alpha: float) -> float:
    return 1.0 if k == n else float(beta.isf(alpha, k + 1, n - k))


def _check(tp, fn, fp, tn):
    for name, v in (("tp", tp), ("fn", fn), ("fp", fp), ("tn", tn)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {v!r}")
    if tp + fn == 0 or fp + tn == 0:
        raise ValueError("need at least one member run and one non-member run")


def clopper_pearson_epsilon(tp: int, fn: int, fp: int, tn: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    _check(tp, fn, fp, tn)
    a = (1 - confidence) / 2
    n_in, n_out = tp + fn, fp + tn
    tpr_lo, fpr_hi = cp_lower(tp, n_in, a), cp_upper(fp, n_out, a)
    tnr_lo, fnr_hi = cp_lower(tn, n_out, a), cp_upper(fn, n_in, a)
    cands = [0.0]
    if tpr_lo - delta > 0 and fpr_hi > 0:
        cands.append(math.log((tpr_lo - delta) / fpr_hi))
    if tnr_lo - delta > 0 and fnr_hi > 0:
        cands.append(math.log((tnr_lo - delta) / fnr_hi))
    return max(cands)


def gdp_mu_lower(tp: int, fn: int, fp: int, tn: int, confidence: float = 0.95) -> float:
    _check(tp, fn, fp, tn)
    a = (1 - confidence) / 2
    fpr_hi = cp_upper(fp, fp + tn, a)
    fnr_hi = cp_upper(fn, tp + fn, a)
    mu = norm.isf(fpr_hi) - norm.ppf(fnr_hi)
    return max(0.0, float(mu))


def gdp_delta(eps: float, mu: float) -> float:
    """delta(eps) of mu-GDP (Dong, Roth, Su); e^eps times the second tail in log space, so a large eps or mu
    never overflows (e^eps alone does from eps = 709)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps + norm.logcdf(-eps / mu - mu / 2)))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The eps at which a mu-GDP mechanism has the given delta (0 when mu-GDP already meets delta at eps=0)."""
    if mu <= 0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-10))
