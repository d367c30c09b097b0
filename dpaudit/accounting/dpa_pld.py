"""dp_accounting privacy-loss distributions: an interval [optimistic, pessimistic] around the true epsilon.

The upper end is the pessimistic connect-the-dots PLD, whose error shrinks about as d^2: it starts at
dp_accounting's default discretisation d = 1e-4 (the value ``epsilon`` calibrates with) and halves d while a
halving still moves it by more than UPPER_RTOL of epsilon. The lower end is the optimistic PLD (privacy
buckets), which under-estimates epsilon by about T * d / 2 after T compositions, so its d is 2% of epsilon / T
(within about 1%), clamped to [d_min, 1e-4]. A pass costs about one microsecond per grid point of one step's
losses (``loss_range / d``), so d_min = max(1e-5, loss_range / GRID_POINTS) keeps every pass under a second
on two cores: where it binds (small epsilon over many steps, small sigma), the upper end moves by at most a
few 1e-5 of epsilon and the lower end is wider, its width reported; Opacus PRV's lower end is then the
tighter one (reports/bench/accounting.md compares both with the earlier fixed 1e-5 floor). Add/remove PLDs
are built by :mod:`.dpa_pld_grid` (dp_accounting's construction with its grid evaluated as arrays); replace-one
ones by dp_accounting itself. A fixed 1e-3 grid, as
used before, over-states epsilon by 17% at T = 5000 steps of q = 5.5e-4. Poisson sampling; add/remove or
replace-one neighbours, as the card states.
"""

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation

from dpaudit.accounting import dpa_pld_grid
from dpaudit.accounting.events import SubsampledGaussian, grid_guard, require

RELATIONS = {"add_remove": NeighboringRelation.ADD_OR_REMOVE_ONE, "replace_one": NeighboringRelation.REPLACE_ONE}
GAP = 0.01
DEFAULT = 1e-4  # dp_accounting PLDAccountant's default discretisation: the upper end's first grid
FINEST = 1e-5  # the finest grid of either end
GRID_POINTS = 300_000  # and at most this many points per step's losses (~0.4 s a pass on this project's CPU)
UPPER_RTOL = 2e-5  # stop refining the upper end when halving d moves it by less than this fraction of epsilon


def to_dp_event(events: list[SubsampledGaussian]) -> dp_accounting.DpEvent:
    parts = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(ev.sample_rate, dp_accounting.GaussianDpEvent(ev.noise_multiplier)),
            ev.steps,
        )
        for ev in events
    ]
    return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def _pld(events, relation: str, disc: float, pessimistic: bool):
    total = None
    for ev in events:
        if relation == "add_remove":  # the same PLD, its grid evaluated as arrays (accounting/dpa_pld_grid.py)
            p = dpa_pld_grid.gaussian_pld(ev.noise_multiplier, ev.sample_rate, disc, pessimistic).self_compose(
                ev.steps)
            total = p if total is None else total.compose(p)
            continue
        p = pld_lib.from_gaussian_mechanism(ev.noise_multiplier, pessimistic_estimate=pessimistic,
                                            value_discretization_interval=disc, sampling_prob=ev.sample_rate,
                                            use_connect_dots=pessimistic, neighboring_relation=RELATIONS[relation]
                                            ).self_compose(ev.steps)
        total = p if total is None else total.compose(p)
    return total


def _epsilon(events, delta: float, relation: str, disc: float, pessimistic: bool) -> float:
    return float(_pld(events, relation, disc, pessimistic).get_epsilon_for_delta(delta))


def interval(events, delta: float, relation: str = "add_remove", dataset_size=None) -> tuple:
    require(events, ("poisson",), "dp_accounting PLD", relation, tuple(RELATIONS))
    grid_guard("pld", events)  # its grid would need GBs at a tiny sigma: RDP answers
    d_min = max(FINEST, max(dpa_pld_grid.loss_range(ev.noise_multiplier, ev.sample_rate) for ev in events)
                / GRID_POINTS)
    d_hi = DEFAULT
    hi = _epsilon(events, delta, relation, d_hi, True)
    while d_hi / 2 >= d_min:
        finer = _epsilon(events, delta, relation, d_hi / 2, True)
        moved, hi, d_hi = hi - finer, min(hi, finer), d_hi / 2  # each is an upper bound: keep the smaller
        if moved <= UPPER_RTOL * hi:
            break
    steps = sum(ev.steps for ev in events)
    d_lo = min(DEFAULT, max(d_min, 2 * GAP * hi / steps))
    lo = _epsilon(events, delta, relation, d_lo, False)
    return (max(0.0, lo), hi, f"discretisation {d_hi:.1e} (upper), {d_lo:.1e} (lower), "
                              f"gap {(hi - lo) / max(hi, 1e-12):.1%}")


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    """The pessimistic value at dp_accounting's default discretisation (1e-4): one pass, for calibration."""
    require(events, ("poisson",), "dp_accounting PLD", "add_remove")
    return _epsilon(events, delta, "add_remove", DEFAULT, True)


def privacy_profile(events: list[SubsampledGaussian], epsilons, relation: str = "add_remove"):
    """delta(eps) at each of ``epsilons`` from the pessimistic PLD (an upper bound on the true delta, so the
    trade-off curve built from it is never more private than the mechanism's): the claim's whole curve,
    for :func:`dpaudit.audit.fdp.rejects_profile`."""
    import numpy as np

    require(events, ("poisson",), "dp_accounting PLD", relation, tuple(RELATIONS))
    deltas = _pld(events, relation, DEFAULT, True).get_delta_for_epsilon(list(map(float, epsilons)))
    return np.minimum(1.0, np.asarray(deltas, dtype=float))
