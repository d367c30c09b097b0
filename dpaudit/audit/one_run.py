"""One-run privacy audit (Steinke, Nasr, Jagielski 2023, "Privacy Auditing with One (1) Training Run").

m canaries are each included with probability 1/2 (S_i = +1) or held out (S_i = -1). The auditor
ranks the canaries by a membership score, guesses "member" for the k_pos highest, "non-member" for
the k_neg lowest and abstains on the rest. If the mechanism is (eps, delta)-DP, the number of correct
guesses W out of r = k_pos + k_neg satisfies (Theorem with the approximate-DP term)

    P[W >= v] <= P[Bin(r, q) >= v] + 2 m delta * max_{i=1..v} (1/i) P[v > Bin(r, q) >= v - i],
    q = e^eps / (1 + e^eps).

The lower bound is eps_lb = sup{eps : p(eps, delta) < 1 - confidence}. It is valid only if k_pos and
k_neg are fixed before looking at the scores (or if the p-value is Bonferroni-corrected for every
configuration tried); :func:`guess_from_scores` takes them as inputs for that reason.

Pure NumPy/SciPy: no torch here.

>>> round(epsilon_lower_bound(m=1000, r=1000, v=1000, delta=0.0), 2)
5.81
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import bdtrc, gammaln


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Upper bound on P[W >= v] for an (eps, delta)-DP mechanism (Steinke et al., Thm. 5.2 form)."""
    if v <= 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(bdtrc(v - 1, r, q))  # binom.sf(v - 1, r, q), the ufunc without scipy.stats' dispatch
    if delta <= 0.0:
        return min(1.0, beta)
    log_choose, j, ranks = _binomial_terms(r, v)
    pmf = np.exp(log_choose + j * math.log(q) + (r - j) * math.log1p(-q))  # pmf(v-1), ..., pmf(0)
    alpha = float(np.max(np.cumsum(pmf) / ranks))
    return min(1.0, beta + alpha * delta * 2 * m)


@lru_cache(maxsize=64)
def _binomial_terms(r: int, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log C(r, j), j, 1..v) for j = v-1 .. 0: what every p-value of these counts shares, whatever eps."""
    j = np.arange(v - 1, -1, -1, dtype=float)
    return gammaln(r + 1.0) - gammaln(j + 1.0) - gammaln(r - j + 1.0), j, np.arange(1, v + 1, dtype=float)


PRECISION = 1e-12  # the root is found to this share of the bracket's top: bounds within 1e-9 of the exact one


@lru_cache(maxsize=8192)  # a pure function of its counts: simulated audits ask the same (m, r, v) again and again
def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95,
                        iters: int = 60) -> float:
    """Largest eps the observed (r guesses, v correct) rejects at the given confidence; 0 if none.

    The p-value grows with eps: the bound is bracketed by doubling, then found by Brent's method to
    :data:`PRECISION` of the bracket's top (``iters`` bounds its iterations, times 4) and kept where the p-value
    is below alpha. Raises ValueError on impossible counts (v > r, r > m, negative numbers).
    """
    _check_counts(m, r, v)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 1.0 - confidence
    if r == 0 or p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < alpha:
        lo, hi = hi, hi * 2.0
        if hi > 1e4:  # cannot happen for finite r; guard against an infinite loop
            return lo
    # The root of p(eps) = alpha by Brent's method (about 10 p-values where halving took 40), then the largest
    # point at or below it whose p-value is still under alpha: the bound stays on the rejected side, and within
    # PRECISION of the bisection's answer (tests/audit/test_bounds_grid.py holds it to the committed grid).
    root = brentq(lambda e: p_value(m, r, v, e, delta) - alpha, lo, hi, xtol=0.25 * PRECISION * hi,
                  maxiter=4 * iters)
    step = PRECISION * hi
    x = min(root, hi)
    while x > lo and p_value(m, r, v, x, delta) >= alpha:
        x = max(lo, x - step)
    return x


@lru_cache(maxsize=1024)
def ceiling(m: int, r: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    """The largest bound these many guesses can ever give (all r guesses correct)."""
    return epsilon_lower_bound(m, r, r, delta=delta, confidence=confidence)


@dataclass(frozen=True)
class OneRunResult:
    """A one-run audit outcome; carries everything needed to recompute it."""

    m: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    confidence: float
    epsilon_lb: float
    ceiling: float
    group_size: int = 1
    threshold_rule: str = "fixed in advance"

    def to_dict(self) -> dict:
        return asdict(self)


TIE_SEED = 20230512  # the tie-breaking permutation's seed: a constant, drawn with no reference to any data


def rank_order(scores) -> np.ndarray:
    """Indices that sort ``scores`` ascending, equal scores in an order drawn independently of everything.

    The one-run analysis needs the guesses to be a function of what the attack saw, independent of the coins
    given it. A canary's position in the input is not: a file written members first, then held-out ones, breaks
    ties by membership under an index-order sort, and tied scores (a constant attack, bf16 losses, an untouched
    model) then showed epsilon >= 3.5 from no signal (200 tied canaries, fixed guesses). Ties are therefore broken
    by a fixed pseudo-random permutation of the positions (:data:`TIE_SEED`); without ties the order is the plain
    sort's."""
    scores = np.asarray(scores, dtype=float)
    order = np.argsort(scores, kind="stable")
    ranked = scores[order]
    if ranked.size > 1 and bool(np.any(ranked[1:] == ranked[:-1])):
        tiebreak = np.random.default_rng([TIE_SEED, scores.size]).permutation(scores.size)
        order = np.lexsort((tiebreak, scores))
    return order


def guess_from_scores(scores, k_pos: int, k_neg: int) -> np.ndarray:
    """Guesses T_i in {-1, 0, +1}: +1 for the k_pos highest scores, -1 for the k_neg lowest.

    Equal scores are ranked by :func:`rank_order` (a permutation independent of the input's order), never by
    position or membership, so the guess is a function of the scores alone.
    """
    scores = np.asarray(scores, dtype=float)
    m = scores.size
    if k_pos < 0 or k_neg < 0 or k_pos + k_neg > m:
        raise ValueError(f"need 0 <= k_pos + k_neg <= m; got k_pos={k_pos}, k_neg={k_neg}, m={m}")
    if np.isnan(scores).any():
        raise ValueError("membership scores contain NaN; fix the attack before auditing")
    order = rank_order(scores)
    guesses = np.zeros(m, dtype=int)
    if k_neg:
        guesses[order[:k_neg]] = -1
    if k_pos:
        guesses[order[m - k_pos:]] = 1
    return guesses


def audit(scores, membership, k_pos: int, k_neg: int, delta: float = 0.0, confidence: float = 0.95,
          group_size: int = 1) -> OneRunResult:
    """Run the one-run audit with guess counts fixed in advance.

    ``membership`` holds S_i (+1 inserted, -1 held out, or booleans). With ``group_size`` c > 1 (each
    canary inserted c times), the bound is on the group's epsilon; the record-level bound is
    epsilon_lb / c, which is what ``epsilon_lb`` reports (and ``ceiling`` likewise). ``delta`` must
    then be the group's delta.
    """
    s = _as_signs(membership)
    guesses = guess_from_scores(scores, k_pos, k_neg)
    if s.size != guesses.size:
        raise ValueError(f"{guesses.size} scores but {s.size} membership labels")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    m = int(s.size)
    r = int(k_pos + k_neg)
    v = int(np.sum(np.maximum(0, guesses * s)))
    lb = epsilon_lower_bound(m, r, v, delta=delta, confidence=confidence) / group_size
    cap = ceiling(m, r, delta=delta, confidence=confidence) / group_size
    return OneRunResult(m=m, k_pos=int(k_pos), k_neg=int(k_neg), r=r, v=v, delta=float(delta),
                        confidence=float(confidence), epsilon_lb=lb, ceiling=cap,
                        group_size=int(group_size))


def _as_signs(membership) -> np.ndarray:
    a = np.asarray(membership)
    if a.dtype == bool:
        return np.where(a, 1, -1)
    a = a.astype(int)
    if not np.isin(a, (-1, 1)).all():
        raise ValueError("membership must be booleans or +1/-1")
    return a


def _check_counts(m: int, r: int, v: int) -> None:
    if m < 0 or r < 0 or v < 0:
        raise ValueError(f"counts must be non-negative; got m={m}, r={r}, v={v}")
    if v > r:
        raise ValueError(f"correct guesses v={v} cannot exceed guesses r={r}")
    if r > m:
        raise ValueError(f"guesses r={r} cannot exceed canaries m={m}")
