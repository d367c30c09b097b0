"""dp_accounting privacy-loss distributions: an interval [optimistic, pessimistic] around the true epsilon.

The pessimistic PLD (connect-the-dots) over-estimates epsilon, the optimistic one (privacy buckets)
under-estimates it by about T * d / 2 after T compositions at discretisation d. So d is scaled to epsilon:
d = 2% of epsilon / T (epsilon from a 1e-3 pass) puts the two within about 1%, clamped to [1e-5, 1e-4]
(1e-4 is dp_accounting's default; below 1e-5 a pass costs minutes). Where the clamp binds (small epsilon
over many steps) the interval is wider and its width is reported. A fixed 1e-3 grid, as used before,
over-states epsilon by 17% at T = 5000 steps of q = 5.5e-4. Poisson sampling; add/remove or replace-one
neighbours, as the card states.
"""

import dp_accounting
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation

from dpaudit.accounting.events import SubsampledGaussian, grid_guard, require

RELATIONS = {"add_remove": NeighboringRelation.ADD_OR_REMOVE_ONE, "replace_one": NeighboringRelation.REPLACE_ONE}
COARSEST, FINEST, GAP = 1e-3, 1e-5, 0.01
DEFAULT = 1e-4  # dp_accounting PLDAccountant's default discretisation


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
    rough = _epsilon(events, delta, relation, COARSEST, True)
    steps = sum(ev.steps for ev in events)
    disc = min(DEFAULT, max(FINEST, 2 * GAP * rough / steps))
    hi = _epsilon(events, delta, relation, disc, True)
    lo = _epsilon(events, delta, relation, disc, False)
    return max(0.0, lo), hi, f"discretisation {disc:.1e}, gap {(hi - lo) / max(hi, 1e-12):.1%}"


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
