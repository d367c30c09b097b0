"""One interface over independent accountants.

>>> from dpaudit.accounting import SubsampledGaussian, compute_all
>>> res = compute_all([SubsampledGaussian(sample_rate=0.01, noise_multiplier=1.0, steps=1000)], 1e-5)
>>> sorted(r.accountant for r in res)
['dpa_rdp', 'pld', 'prv', 'rdp']

Accountants (registry ``ACCOUNTANTS``; adding one is one module and one line):

* ``rdp``: Opacus RDP analysis;
* ``prv``: Opacus PRV accountant (upper end of its error interval);
* ``pld``: dp_accounting PLD (pessimistic);
* ``dpa_rdp``: dp_accounting RDP.

All assume add/remove neighbours and Poisson sampling. Where they disagree, callers report all and
use the largest (:func:`conservative`) so that epsilon is never under-reported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable

from dpaudit.accounting import dpa_pld, dpa_rdp, opacus_prv, opacus_rdp
from dpaudit.accounting.events import SubsampledGaussian, event_from_dict, validate_delta, validate_mechanism
from dpaudit.errors import DpauditError

ACCOUNTANTS: dict[str, Callable[[list, float], float]] = {
    "rdp": opacus_rdp.epsilon,
    "prv": opacus_prv.epsilon,
    "pld": dpa_pld.epsilon,
    "dpa_rdp": dpa_rdp.epsilon,
}

__all__ = ["ACCOUNTANTS", "AccountingResult", "SubsampledGaussian", "calibrate_sigma", "compute",
           "compute_all", "conservative", "event_from_dict", "validate_delta", "validate_mechanism"]


@dataclass(frozen=True)
class AccountingResult:
    accountant: str
    epsilon: float
    delta: float

    def to_dict(self) -> dict:
        return asdict(self)


def _check_accountant(name: str) -> None:
    if name not in ACCOUNTANTS:
        raise DpauditError(f"unknown accountant {name!r}; choose one of {', '.join(ACCOUNTANTS)}")


def compute(events: list, delta: float, accountant: str = "prv") -> AccountingResult:
    _check_accountant(accountant)
    validate_delta(delta)
    if not events:
        raise DpauditError("no privacy events to account; a non-private mechanism has epsilon = inf")
    return AccountingResult(accountant, ACCOUNTANTS[accountant](list(events), delta), delta)


def compute_all(events: list, delta: float, accountants=None) -> list[AccountingResult]:
    return [compute(events, delta, a) for a in (accountants or ACCOUNTANTS)]


def conservative(results: list[AccountingResult]) -> AccountingResult:
    """The largest epsilon among accountants (never under-report)."""
    return max(results, key=lambda r: r.epsilon)


def calibrate_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int,
                    accountant: str = "prv", tol: float = 1e-3, sampler: str = "poisson") -> float:
    """Smallest sigma (to ``tol``) whose epsilon under ``accountant`` is <= target; conservative end."""
    _check_accountant(accountant)
    if not isinstance(target_epsilon, (int, float)) or not target_epsilon > 0 or math.isinf(target_epsilon):
        raise DpauditError(f"target epsilon must be a finite number > 0, got {target_epsilon}")
    validate_delta(delta)
    validate_mechanism(1.0, sample_rate, steps)

    def eps(s: float, name: str = accountant) -> float:
        return ACCOUNTANTS[name]([SubsampledGaussian(sample_rate, s, steps, sampler)], delta)

    def eps_bracket(s: float) -> float:  # integer-order RDP: closed form, never below the tight accountants
        return opacus_rdp.epsilon([SubsampledGaussian(sample_rate, s, steps, sampler)], delta,
                                  orders=opacus_rdp.INTEGER_ORDERS)

    # Bracket with RDP, then refine with the requested accountant inside [0.6 * sigma_rdp, sigma_rdp]:
    # PRV at tiny sigma needs huge grids.
    lo, hi = 0.1, 1.0
    while eps_bracket(hi) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            raise DpauditError(f"no sigma below 1e4 reaches epsilon {target_epsilon}; raise epsilon or delta")
    hi = _bisect(lambda s: eps_bracket(s) > target_epsilon, lo, hi, tol)
    lo = 0.6 * hi
    if eps(lo) <= target_epsilon:
        return lo
    return _bisect(lambda s: eps(s) > target_epsilon, lo, hi, tol)


def _bisect(too_small: Callable[[float], bool], lo: float, hi: float, tol: float) -> float:
    """Given too_small(lo) and not too_small(hi), shrink to width tol; returns the safe (upper) end."""
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if too_small(mid):
            lo = mid
        else:
            hi = mid
    return hi
