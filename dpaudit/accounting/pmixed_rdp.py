"""PMixED's own privacy analysis (Flemings et al. 2024), as the paper and its code state it: the claim.

Everything here is scalar arithmetic at one integer Rényi order alpha (the paper never optimises alpha):

* :func:`rdp_budget` — the total RDP budget eps_RDP from the target (eps_G, delta): the inversion of Balle et
  al.'s conversion (Thm C.3) the code uses, eps_RDP = eps_G - log((a-1)/a) + (log delta + log a)/(a-1);
  per query eps_RDP / T (Thm 5.2 composes T queries additively).
* :func:`base_loss` — the claimed RDP of one query with |S_t| = n models and radius beta*alpha (Thm 5.1):
  log((n - 1 + e^{4 beta a (a-1)}) / n) / (a-1) for n > 1, beta*a for n = 1, 0 for n = 0.
* :func:`subsampled` — Poisson subsampling of the models with rate q (Thm C.4, the binomial form
  :func:`dpaudit.accounting.rdp_general.poisson_subsampled` with ``bound="binomial"``). ``reading="code"``
  puts the base loss at order alpha into every term (as the public code does, larger than the theorem's
  eps(k) at order k since eps(.) increases); ``reading="theorem"`` uses eps(k).
* :func:`beta_star` — the largest beta with subsampled(beta, n) <= per-query budget, by bisection on [0, 5]
  (the code's bracket) returning the lower (feasible) end; recomputed for every realised n = |S_t|.
* :func:`beta_no_subsampling` — Thm 5.1's closed form for all N models at every query (Eq. 6).

What is wrong with the analysis is not corrected here (this module is the claim); the exact per-query
divergences of the real mechanism are computed by :mod:`dpaudit.pmixed.mixing` and compared against it
(docs/methods.md, PMixED).
"""

from __future__ import annotations

import math

from dpaudit.accounting.rdp_general import poisson_subsampled

READINGS = ("code", "theorem")
BETA_BRACKET = (0.0, 5.0)


def _check_alpha(alpha) -> int:
    if isinstance(alpha, bool) or not isinstance(alpha, int) or alpha < 2:
        raise ValueError(f"PMixED's Rényi order alpha must be an integer >= 2 (Thm C.4), got {alpha!r}")
    return alpha


def rdp_budget(eps_g: float, delta: float, alpha: int) -> float:
    """Total RDP at order alpha that Balle et al.'s conversion turns into (eps_g, delta)."""
    a = _check_alpha(alpha)
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return eps_g - math.log((a - 1) / a) + (math.log(delta) + math.log(a)) / (a - 1)


def to_epsilon(rdp: float, delta: float, alpha: int) -> float:
    """(eps, delta) from an RDP value at one order (Balle et al. 2020, Thm C.3): the inverse of rdp_budget."""
    a = _check_alpha(alpha)
    return rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)


def base_loss(alpha: int, beta: float, n: int) -> float:
    """Claimed RDP at order alpha of one query answered by n models mollified at radius beta*alpha."""
    a = _check_alpha(alpha)
    if n <= 0:
        return 0.0
    if n == 1:
        return beta * a
    x = 4 * beta * a * (a - 1)
    return (x + math.log1p((n - 1) * math.exp(-x)) - math.log(n)) / (a - 1)  # log((n - 1 + e^x) / n) / (a - 1)


def subsampled(alpha: int, q: float, beta: float, n: int, reading: str = "code") -> float:
    """Claimed RDP at order alpha of one query with models Poisson-subsampled at rate q, |S_t| = n."""
    a = _check_alpha(alpha)
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}")
    if n <= 0:
        return 0.0
    base = {k: base_loss(a if reading == "code" else k, beta, n) for k in range(2, a + 1)}
    return poisson_subsampled(base, q, orders=(a,), bound="binomial")[a]


def beta_star(alpha: int, q: float, n: int, per_query: float, reading: str = "code", iterations: int = 100) -> float:
    """Largest beta in [0, 5] whose subsampled loss is within ``per_query`` (the feasible end of the bracket)."""
    if n <= 0:
        return 0.0
    lo, hi = BETA_BRACKET
    if subsampled(alpha, q, hi, n, reading) <= per_query:
        return hi
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if subsampled(alpha, q, mid, n, reading) <= per_query:
            lo = mid
        else:
            hi = mid
    return lo


def beta_no_subsampling(n_models: int, alpha: int, per_query: float) -> float:
    """Thm 5.1 (Eq. 6): the radius at which every query to all N models is (alpha, per_query)-RDP."""
    a = _check_alpha(alpha)
    if n_models == 1:
        return per_query / a
    return math.log(n_models * math.exp((a - 1) * per_query) + 1 - n_models) / (4 * a * (a - 1))
