"""One interface over independent accountants.

>>> from dpaudit.accounting import SubsampledGaussian, intervals
>>> done, not_applicable = intervals([SubsampledGaussian(sample_rate=0.01, noise_multiplier=1.0, steps=1000)], 1e-5)
>>> sorted(r.accountant for r in done)
['dpa_rdp', 'pld', 'prv', 'rdp']

Accountants (registry ``ACCOUNTANTS``; a user's own joins with :func:`register_accountant`). Each answers
``interval(events, delta, relation, dataset_size) -> (lower | None, upper, detail)`` for the mechanisms it
analyses and raises :class:`NotApplicable` for the others:

* ``rdp``: Opacus RDP analysis (upper only; add/remove, Poisson);
* ``prv``: Opacus PRV accountant ([lower, upper] of its error bounds, error scaled to epsilon; add/remove, Poisson);
* ``pld``: dp_accounting PLD ([optimistic, pessimistic], discretisation refined until they are within 1%;
  add/remove or replace-one, Poisson);
* ``dpa_rdp``: dp_accounting RDP (upper only; add/remove with Poisson, or replace-one with a ``shuffle``
  sampler accounted as sampling without replacement);
* ``lmo_vector``: LMO-DP's Laplace-mixture noise on a d-dimensional clipped sum (upper only; :mod:`.lmo_vector`).
  The first four analyse the subsampled Gaussian only (``GAUSSIAN_ACCOUNTANTS``, the ones that calibrate sigma).

``upper`` values certify a claim (any one sound upper bound at or below it); ``lower`` values refute one (the
true epsilon is at least the lower end). Where upper values disagree, the claim check reports the largest
(:mod:`dpaudit.claim.reaccount`), so that epsilon is never under-reported.
"""

from __future__ import annotations

import functools
import importlib
import math
import numbers
from typing import Callable

from dpaudit import checks, options
from dpaudit.accounting import events as _events
from dpaudit.accounting import registry as _registry
from dpaudit.accounting import search
from dpaudit.accounting.events import (
    MAX_STEPS,  # noqa: F401 - the step cap, re-exported for the trainers
    AccountingResult,
    NotApplicable,
    SubsampledGaussian,
    SubsampledLaplaceMixture,
    event_from_dict,
    validate_delta,
    validate_mechanism,
)
from dpaudit.accounting.registry import accountant_names, register_accountant
from dpaudit.errors import DpauditError
from dpaudit.markup import probability

# name -> module of this package with ``epsilon(events, delta) -> float``; imported on first use, so that
# reading a privacy card (dpaudit check, dpaudit compare) never loads Opacus or dp_accounting.
_BACKENDS = {"rdp": "opacus_rdp", "prv": "opacus_prv", "pld": "dpa_pld", "dpa_rdp": "dpa_rdp", "lmo_vector": "lmo_vector"}
ACCOUNTANTS = options.ACCOUNTANTS
GAUSSIAN_ACCOUNTANTS = options.GAUSSIAN_ACCOUNTANTS
assert tuple(_BACKENDS) == ACCOUNTANTS, "dpaudit.options.ACCOUNTANTS and the accounting backends disagree"


OPACUS_ACCOUNTANTS = ("rdp", "prv")  # Opacus' own code: not applicable in dpaudit[audit] (no Opacus)
def _backend(name: str):
    _check_accountant(name, accountant_names())
    if name in _registry.REGISTERED:
        return _registry.REGISTERED[name]
    _require_opacus(name)
    return importlib.import_module(f"dpaudit.accounting.{_BACKENDS[name]}")


def _require_opacus(name: str) -> None:
    from dpaudit.accounting import opacus_modules

    if name in OPACUS_ACCOUNTANTS and not opacus_modules.available():
        from dpaudit.install_hint import pip_command

        raise NotApplicable(f"{name} is Opacus' accountant and Opacus is not installed (dpaudit[audit]): "
                            f"{pip_command('train')} for it; the other accountants answer without it")


def epsilon_function(name: str) -> Callable[[list, float], float]:
    """``epsilon(events, delta)``: the accountant's upper value, add/remove neighbours."""
    backend = _backend(name)
    fn = getattr(backend, "epsilon", None) or (lambda events, delta: backend.interval(events, delta, "add_remove",
                                                                                      None)[1])
    if name not in _events.GRID_ACCOUNTANTS:
        return fn

    def guarded(events, delta):
        _events.grid_guard(name, events)
        return fn(events, delta)
    return guarded


__all__ = ["ACCOUNTANTS", "AccountingResult", "GAUSSIAN_ACCOUNTANTS", "NotApplicable", "accountant_names",
           "epsilon_function", "register_accountant",
           "SubsampledGaussian", "SubsampledLaplaceMixture",
           "calibrate_sigma", "calibrate_sigma_after", "compute", "event_from_dict", "interval", "intervals",
           "validate_delta", "validate_mechanism"]


def _check_accountant(name: str, allowed: tuple | None = None) -> None:
    allowed = accountant_names() if allowed is None else allowed
    if name not in allowed:
        raise DpauditError(f"unknown accountant {name!r}; choose one of {', '.join(allowed)}")


def compute(events: list, delta: float, accountant: str = "prv") -> AccountingResult:
    _check_accountant(accountant)
    validate_delta(delta)
    if not events:
        raise DpauditError("no privacy events to account; a non-private mechanism has epsilon = inf")
    return AccountingResult(accountant, epsilon_function(accountant)(list(events), delta), delta)


def interval(events: list, delta: float, accountant: str, relation: str = "add_remove",
             dataset_size: int | None = None) -> AccountingResult:
    """The accountant's [lower, upper] for the stated neighbouring relation; :class:`NotApplicable` when it has
    no analysis of this mechanism."""
    validate_delta(delta)
    if not events:
        raise DpauditError("no privacy events to account; a non-private mechanism has epsilon = inf")
    _check_accountant(accountant)
    from dpaudit.accounting import disk_cache

    return _interval(tuple(events), float(delta), accountant, relation, dataset_size, disk_cache.trusted())


@functools.lru_cache(maxsize=128)
def _interval(events: tuple, delta: float, accountant: str, relation: str, dataset_size,
              read_disk: bool) -> AccountingResult:
    """:func:`interval` of immutable events, computed once per process: a card is often accounted twice in one
    run (``dpaudit account --card`` then ``evaluate``; every variant of ``dpaudit run``), and a PLD pass at a
    fine discretisation costs seconds. NotApplicable is raised again on every call (exceptions are not cached).
    ``read_disk`` False (inside :func:`disk_cache.bypassed`): computed here, whatever the disk holds."""
    from dpaudit.accounting import disk_cache

    if accountant in _registry.REGISTERED:  # the user's accountant: computed each time, never cached on disk
        lo, hi, detail = _registry.REGISTERED[accountant].interval(list(events), delta, relation, dataset_size)
        return AccountingResult(accountant, float(hi), delta, None if lo is None else float(lo), relation, str(detail))
    _require_opacus(accountant)  # before the cache: dpaudit[audit] never reads a full one's answers for Opacus
    k = disk_cache.key(accountant, _BACKENDS[accountant], events, delta, relation, dataset_size)
    hit = disk_cache.get(k) if read_disk else None
    if hit is not None:  # the same mechanism, code and libraries: the stored answer (accounting/disk_cache.py)
        if "not_applicable" in hit:
            raise NotApplicable(hit["not_applicable"])
        return AccountingResult(accountant, hit["upper"], delta, hit["lower"], relation, hit.get("detail", ""))
    try:
        lo, hi, detail = _backend(accountant).interval(list(events), delta, relation, dataset_size)
    except NotApplicable as e:
        disk_cache.put(k, {"not_applicable": str(e)})
        raise
    disk_cache.put(k, {"lower": lo, "upper": hi, "detail": detail})
    return AccountingResult(accountant, hi, delta, lo, relation, detail)


_registry.ON_CHANGE.append(_interval.cache_clear)  # a registered name's answers are never stale


def intervals(events: list, delta: float, relation: str = "add_remove", dataset_size: int | None = None,
              accountants=None) -> tuple[list[AccountingResult], dict[str, str]]:
    """(results of the accountants that analyse this mechanism, {accountant: why not} for the others).

    The accountants run side by side in threads (their passes are NumPy and SciPy FFTs, which release the GIL:
    a cold 10^5-step card takes the longest one's time, not the sum); the order of the results is the
    registry's."""
    from concurrent.futures import ThreadPoolExecutor

    names = list(accountants or accountant_names())

    def one(name):
        try:
            return interval(events, delta, name, relation, dataset_size)
        except NotApplicable as e:
            return e

    with ThreadPoolExecutor(max_workers=min(4, len(names)) or 1) as pool:
        answers = list(pool.map(one, names))
    done = [a for a in answers if isinstance(a, AccountingResult)]
    skipped = {n: str(a) for n, a in zip(names, answers) if isinstance(a, NotApplicable)}
    return done, skipped


SIGMA_MAX = 1e4  # calibrate_sigma searches noise multipliers up to this
CALIBRATE_MAX = 1000.0  # and targets epsilon up to this (beyond it sigma is tiny and the accountants' grids explode)
# ... and down to this: below it the accountants' answers have no digits left (PRV's error is about 0.01 absolute,
# PLD's discretisation 1e-4 to 1e-3), and a tiny target's calibrated claim came back as 0.0 or -1e-9 after training
CALIBRATE_MIN = 0.01


def check_reachable(target_epsilon: float, delta: float, sample_rate: float, steps: int, what: str = "") -> None:
    """Refuse, before any training, a target epsilon that no noise multiplier up to :data:`SIGMA_MAX` reaches
    (the bracket :func:`calibrate_sigma` would fail on): integer-order RDP, a closed form, in milliseconds."""
    check_target_floor(target_epsilon, what)
    validate_delta(delta)
    validate_mechanism(1.0, sample_rate, steps)
    eps = _rdp_bracket([SubsampledGaussian(sample_rate, SIGMA_MAX, steps)], delta)
    if eps > target_epsilon:
        raise DpauditError(f"{what}target epsilon {target_epsilon:g} is out of reach: even sigma = {SIGMA_MAX:g} gives "
                           f"{eps:.3g} at delta {probability(delta)} over {steps} steps at q = {sample_rate:.4g}; raise the target "
                           "or delta, or train fewer steps")


def check_target_floor(target_epsilon: float, what: str = "") -> None:
    """A target epsilon below :data:`CALIBRATE_MIN` is refused: no accountant states such a claim to its digits."""
    if checks.number(target_epsilon) and 0 < target_epsilon < CALIBRATE_MIN:
        raise DpauditError(f"{what}target epsilon {target_epsilon:g} is below {CALIBRATE_MIN:g}: the accountants' "
                           "answers have no digits left there (PRV's error is about 0.01); choose epsilon >= "
                           f"{CALIBRATE_MIN:g}")


def _rdp_bracket(events: list, delta: float) -> float:
    """An RDP epsilon (a valid upper bound, never below the tight accountants) fast enough to bracket a search:
    Opacus' RDP at integer orders (closed form, milliseconds), or dp_accounting's RDP where Opacus is not installed
    (dpaudit[audit])."""
    from dpaudit.accounting import opacus_modules

    if opacus_modules.available():
        from dpaudit.accounting import opacus_rdp

        return opacus_rdp.epsilon(events, delta, orders=opacus_rdp.INTEGER_ORDERS)
    from dpaudit.accounting import dpa_rdp

    return dpa_rdp.epsilon(events, delta)


def calibrate_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int,
                    accountant: str = "prv", tol: float = 1e-3, sampler: str = "poisson") -> float:
    """Smallest sigma (to ``tol``) whose epsilon under ``accountant`` is <= target; conservative end. Computed once
    per process for the same arguments (a search costs seconds of PRV passes; a run, its resume and its dry run
    calibrate the same mechanism): the shipped Gaussian accountants only, whose answers depend on nothing else."""
    reals = (target_epsilon, delta, sample_rate, tol)
    if (all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in reals) and isinstance(steps, numbers.Integral)
            and not isinstance(steps, bool) and isinstance(accountant, str) and isinstance(sampler, str)):
        return _calibrate_sigma_once(float(target_epsilon), float(delta), float(sample_rate), int(steps), accountant,
                                     float(tol), sampler)
    return _calibrate_sigma(target_epsilon, delta, sample_rate, steps, accountant, tol, sampler)  # refuses it


@functools.lru_cache(maxsize=256)
def _calibrate_sigma_once(*mechanism) -> float:  # (target, delta, q, steps, accountant, tol, sampler), normalised
    """Once per process, and once per machine through the accounting cache (:func:`.disk_cache.calibrated`)."""
    from dpaudit.accounting import disk_cache

    return disk_cache.calibrated(mechanism, lambda *m: _calibrate_sigma(*m))


def _calibrate_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int,
                     accountant: str = "prv", tol: float = 1e-3, sampler: str = "poisson") -> float:
    _check_accountant(accountant, GAUSSIAN_ACCOUNTANTS)
    _require_opacus(accountant)  # never another accountant's answer under this one's name
    if not isinstance(target_epsilon, (int, float)) or isinstance(target_epsilon, bool) or not target_epsilon > 0 or math.isinf(target_epsilon):
        raise DpauditError(f"target epsilon must be a finite number > 0, got {target_epsilon}")
    check_target_floor(target_epsilon)
    if target_epsilon > CALIBRATE_MAX:
        raise DpauditError(f"target epsilon {target_epsilon:g} is above {CALIBRATE_MAX:g}: no noise multiplier worth "
                           "calibrating (the accountants' grids at such tiny sigma take hours); train without a claim "
                           "(target_epsilon = inf) or choose a smaller epsilon")
    validate_delta(delta)
    validate_mechanism(1.0, sample_rate, steps)

    def eps(s: float, name: str = accountant) -> float:
        return epsilon_function(name)([SubsampledGaussian(sample_rate, s, steps, sampler)], delta)

    def eps_bracket(s: float) -> float:  # integer-order RDP: closed form, never below the tight accountants
        return _rdp_bracket([SubsampledGaussian(sample_rate, s, steps, sampler)], delta)

    # Bracket with RDP, then refine with the requested accountant inside [0.6 * sigma_rdp, sigma_rdp]:
    # PRV at tiny sigma needs huge grids.
    lo, hi = 0.1, 1.0
    while eps_bracket(hi) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > SIGMA_MAX:
            raise DpauditError(f"no sigma below {SIGMA_MAX:g} reaches epsilon {target_epsilon}; raise epsilon or delta")
    hi = search.bisect(lambda s: eps_bracket(s) > target_epsilon, lo, hi, tol)
    lo = 0.6 * hi

    def value(s: float) -> float:  # a sigma the accountant cannot grid (NotApplicable) is never the answer
        try:
            return eps(s)
        except NotApplicable:
            return math.inf

    at_lo = value(lo)
    if not at_lo > target_epsilon:
        return lo
    return search.threshold(value, target_epsilon, lo, hi, tol, known={lo: at_lo})  # bisection's answer, fewer passes


def calibrate_sigma_after(target_epsilon: float, delta: float, fixed: list, sample_rate: float, steps: int,
                          accountant: str = "rdp", tol: float = 1e-3) -> float:
    """Smallest sigma (to ``tol``, the safe end) for ``steps`` more subsampled-Gaussian steps at ``sample_rate`` such
    that they composed after the ``fixed`` events stay within ``target_epsilon`` (DP-FROST's ComputeSigma, step
    2). An error when the fixed events alone already spend the target."""
    _check_accountant(accountant, GAUSSIAN_ACCOUNTANTS)
    _require_opacus(accountant)
    validate_delta(delta)
    validate_mechanism(1.0, sample_rate, steps)
    eps = epsilon_function(accountant)
    if eps(list(fixed), delta) >= target_epsilon:
        raise DpauditError(f"the other phases already spend epsilon >= {target_epsilon}; lower their share")

    known: dict[float, float] = {}

    def value(s: float) -> float:  # a sigma the accountant cannot grid (NotApplicable) is never the answer
        if s not in known:
            try:
                known[s] = eps([*fixed, SubsampledGaussian(sample_rate, s, steps)], delta)
            except NotApplicable:
                known[s] = math.inf
        return known[s]

    lo, hi = 0.05, 1.0
    while value(hi) > target_epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e5:
            raise DpauditError(f"no sigma below 1e5 fits the remaining budget of epsilon {target_epsilon}")
    if not value(lo) > target_epsilon:
        return lo
    return search.threshold(value, target_epsilon, lo, hi, tol, known=known)
