"""RDP of a general (non-Gaussian) mechanism: Poisson subsampling, composition and conversion to (eps, delta).

Opacus' and dp_accounting's RDP accountants know the Gaussian only; LMO-DP's Laplace mixture needs the general
machinery, written here once and tested against them on the Gaussian.

* :func:`poisson_subsampled` — at integer orders alpha >= 2 for a mechanism with RDP eps(l) at l = 2..alpha
  (add/remove neighbours), e^{(a-1) eps'(a)} <=
  (1-q)^{a-1}(1 + (a-1)q) + C(a,2) q^2 (1-q)^{a-2} e^{eps(2)} + F sum_{l>=3} C(a,l) q^l (1-q)^{a-l} e^{(l-1)eps(l)}:
  ``bound="zhu_wang"`` (F = 3) is Zhu & Wang's (ICML 2019, Thm 6) general upper bound, both directions;
  ``bound="binomial"`` (F = 1) is the binomial expansion of E_Q[((1-q) + q P/Q)^a], exact for the removal
  direction D((1-q)Q + qP || Q) (the form PMixED quotes from Steinke 2022) and exact for the Gaussian
  (Mironov et al. 2019, what Opacus computes), but not a proven bound on the other direction of a general
  mechanism.
* :func:`to_epsilon` — RDP -> (eps, delta): ``balle`` (Balle et al. 2020, as Opacus), ``mironov`` (Mironov
  2017), and ``paper_eq1``, LMO-DP's printed Eq. 1, eps = min_a log((log(1/delta) + eps_a) / a), which is
  not a conversion (dimensionally meaningless; it can be negative) and is kept to show what it gives.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

CONVERSIONS = ("balle", "mironov", "paper_eq1")
INTEGER_ORDERS = tuple(range(2, 129))  # the paper's alpha in {2, ..., 128}


BOUNDS = ("zhu_wang", "binomial")


def poisson_subsampled(base: dict[int, float], q: float, orders=INTEGER_ORDERS, bound: str = "zhu_wang"
                       ) -> dict[int, float]:
    """{alpha: RDP of the Poisson-subsampled mechanism} from ``base`` = {l: RDP of the mechanism} at every
    integer l = 2..max(orders) (inf allowed: the bound is then inf at every order that needs it)."""
    if bound not in BOUNDS:
        raise ValueError(f"bound must be one of {BOUNDS}")
    if not 0 < q <= 1:
        raise ValueError(f"sample rate must be in (0, 1], got {q}")
    orders = [int(a) for a in orders]
    if any(a < 2 for a in orders):
        raise ValueError("integer orders >= 2 only")
    if q == 1:
        return {a: float(base[a]) for a in orders}
    # one matrix for every order at once (row = order a, column = l = 2..max a; l > a masked out): the orders'
    # sums are row-wise log-sum-exps, not one scipy call per order (the LMO-DP noise search calls this ~10^4 times)
    a, ls, log_binom, valid = _order_table(tuple(orders))
    eps = np.array([base[int(m)] for m in range(2, len(ls) + 2)], dtype=float)
    with np.errstate(invalid="ignore"):
        log_terms = log_binom + ls * math.log(q) + (a - ls) * math.log1p(-q) + (ls - 1) * eps
    if bound == "zhu_wang":
        log_terms = np.where(ls >= 3, log_terms + math.log(3), log_terms)
    log_terms = np.where(valid, log_terms, -np.inf)
    head = (a - 1) * math.log1p(-q) + np.log1p((a - 1) * q)
    terms = np.concatenate([head, log_terms], axis=1)
    top_j = terms.argmax(axis=1)
    rows = np.arange(len(orders))
    peak = terms[rows, top_j]
    terms[rows, top_j] = -np.inf
    with np.errstate(invalid="ignore", over="ignore"):  # log(sum) = peak + log1p(sum of the others / peak)
        shift = np.where(np.isfinite(peak), peak, 0.0)[:, None]
        total = (peak + np.log1p(np.exp(terms - shift).sum(axis=1))) / (a[:, 0] - 1)
    inf_up_to = np.logical_or.accumulate(np.isinf(eps))  # [i]: some eps(l) infinite for l <= i + 2
    return {o: (math.inf if inf_up_to[o - 2] else float(t)) for o, t in zip(orders, total)}


@lru_cache(maxsize=64)
def _order_table(orders: tuple[int, ...]):
    """(orders as a column, l = 2..max as a row, log C(a, l), l <= a) for :func:`poisson_subsampled`."""
    a = np.array(orders, dtype=float)[:, None]
    ls = np.arange(2, max(orders) + 1, dtype=float)[None, :]
    with np.errstate(invalid="ignore"):
        log_binom = gammaln(a + 1) - gammaln(ls + 1) - gammaln(np.maximum(a - ls, 0) + 1)
    for arr in (a, ls, log_binom):
        arr.setflags(write=False)
    valid = ls <= a
    valid.setflags(write=False)
    return a, ls[0], log_binom, valid


def compose(*curves: dict[int, float], counts=None) -> dict[int, float]:
    """RDP of a composition: orders present in every curve, values summed (``counts[i]`` times curve i)."""
    counts = counts or [1] * len(curves)
    orders = set.intersection(*(set(c) for c in curves))
    return {a: float(sum(n * c[a] for n, c in zip(counts, curves))) for a in sorted(orders)}


def to_epsilon(curve: dict[int, float], delta: float, conversion: str = "balle") -> tuple[float, int]:
    """(epsilon, the order achieving it) at ``delta`` (min over the orders of the curve)."""
    if conversion not in CONVERSIONS:
        raise ValueError(f"conversion must be one of {CONVERSIONS}")
    best = (math.inf, 0)
    for a, r in curve.items():
        if not math.isfinite(r):
            continue
        e = _convert(r, a, delta, conversion)
        if e < best[0]:
            best = (e, a)
    return best


def _convert(r: float, a: float, delta: float, conversion: str) -> float:
    if conversion == "mironov":
        return r + math.log(1 / delta) / (a - 1)
    if conversion == "balle":
        return max(0.0, r + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return math.log((math.log(1 / delta) + r) / a)


def floor(delta: float, max_order: int, conversion: str = "balle") -> float:
    """The smallest epsilon the conversion can give with orders up to ``max_order`` (zero RDP): a claim near it
    mostly reflects the order grid, not the mechanism."""
    return _convert(0.0, max_order, delta, conversion)
