"""Opacus PRV accountant (Gopi et al. 2021): an interval [lower, upper] around the true epsilon.

Opacus' ``get_epsilon`` returns only the upper end at an absolute error of 0.01, which at small epsilon is a
wide interval (0.16 +- 0.01 is 6%); here the error is scaled to epsilon (1%, at least 1e-3) and both ends of
the PRV's error bounds are kept (``PRVAccountant._get_dprv``, Opacus 1.4 - 1.6). Add/remove, Poisson.
"""

import contextlib
import warnings

import numpy as np

from dpaudit.accounting import opacus_modules
from dpaudit.accounting.events import NotApplicable, SubsampledGaussian, grid_guard, require

COARSE_ERROR = 0.01
RELATIVE_ERROR = 0.005  # eps_error = RELATIVE_ERROR * epsilon: the interval is about 1% wide
MIN_ERROR = 1e-3


def _prv_accountant():
    """A fresh Opacus ``PRVAccountant``, loaded without torch (accounting/opacus_modules.py)."""
    return opacus_modules.module("accountants.prv").PRVAccountant()


MAX_GRID = 5 * 10 ** 7  # points of the discretised privacy loss (400 MB of float64 per array; PRV keeps several)


def _guard_grid(acc, eps_error: float, delta_error: float) -> None:
    """NotApplicable, before any grid is allocated, when Opacus' PRV would discretise on more than MAX_GRID points
    (10^8 steps asked for 455 GiB). The domain found is the one ``acc`` then discretises on: the search for it (half
    of a PRV pass's time) is not run a second time inside Opacus (``_get_dprv`` asks ``_get_domain`` with the same
    PRVs, compositions and errors)."""
    prv = opacus_modules.module("accountants.analysis.prv")
    with _quiet():  # exp overflows while the domain's tails are searched: harmless, not shown
        domain = acc._get_domain([prv.PoissonSubsampledGaussianPRV(q, s) for s, q, _ in acc.history],
                                 [t for _, _, t in acc.history], eps_error, delta_error)
    if domain.size > MAX_GRID:
        raise NotApplicable(f"prv would discretise on {domain.size:,} points at {sum(t for *_, t in acc.history):,} "
                            f"steps (more than {MAX_GRID:,}); the RDP accountants answer")
    acc._get_domain = lambda *args, **kwargs: domain  # this accountant's history and errors only (a fresh one each)


@contextlib.contextmanager
def _quiet():
    """Opacus' PRV takes log(0) at q = 1 (a full batch) inside an np.where that discards it, and exp overflows in
    the tails it searches: numpy warns of both, harmlessly; a CI log should not carry them."""
    with warnings.catch_warnings(), np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _bounds(events, delta: float, eps_error: float) -> tuple[float, float, float]:
    acc = _prv_accountant()
    acc.history = [(ev.noise_multiplier, ev.sample_rate, ev.steps) for ev in events]
    delta_error = delta / 1000
    _guard_grid(acc, eps_error, delta_error)
    with _quiet():
        low, est, high = acc._get_dprv(eps_error=eps_error, delta_error=delta_error).compute_epsilon(
            delta, delta_error, eps_error)
    return float(low), float(est), float(high)


def interval(events, delta: float, relation: str = "add_remove", dataset_size=None) -> tuple:
    require(events, ("poisson",), "Opacus PRV", relation)
    grid_guard("prv", events)  # its grid would need GBs at a tiny sigma: RDP answers
    low, est, high = _bounds(events, delta, COARSE_ERROR)
    err = max(MIN_ERROR, RELATIVE_ERROR * est)
    if err < COARSE_ERROR:
        low, est, high = _bounds(events, delta, err)
    else:
        err = COARSE_ERROR
    return max(0.0, low), high, f"eps_error {err:.2g}"


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    """Opacus' own answer (upper end at eps_error 0.01): what a claim calibrated with Opacus PRV states."""
    require(events, ("poisson",), "Opacus PRV", "add_remove")
    acc = _prv_accountant()
    acc.history = [(ev.noise_multiplier, ev.sample_rate, ev.steps) for ev in events]
    _guard_grid(acc, COARSE_ERROR, delta / 1000)  # get_epsilon's own delta_error
    with _quiet():
        return float(acc.get_epsilon(delta=delta, eps_error=COARSE_ERROR))
