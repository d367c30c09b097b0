"""How far a sound analysis of LMO-DP's d-dimensional mechanism can go: the floors of the methods available, for
a claim that sits between the mechanism's dense-limit estimate and them (docs/methods.md, "LMO-DP").

With per-coordinate draws a step adds i.i.d. noise of density f (the Laplace mixture) to every coordinate of an
L2-clipped sum, and the neighbouring record chooses the direction of its difference (norm <= C). The proven
interval comes from :mod:`.lmo_vector` (upper: every direction, through RDP) and :mod:`.lmo_pld` (lower: exact
PLDs of particular directions). This module says why that interval cannot always be closed:

* :func:`dense_limit` — C spread evenly over m coordinates, m -> inf: the step's privacy loss tends (local
  asymptotic normality) to a Gaussian shift of mean C sqrt(I_f), I_f the Fisher information of f, so the
  Poisson-subsampled Gaussian at noise multiplier 1 / (C sqrt(I_f)) composed T times estimates that direction's
  epsilon (PLD). An estimate, not a bound either way: other directions can be worse, finite m differs.
* :func:`rdp_floor` — an RDP analysis over all directions pays at least the RDP of that limit at every order (the
  dense directions attain it), so its epsilon, by the (eps, delta) conversion every accountant here uses
  (dp_accounting's), is at least the RDP epsilon of the same subsampled Gaussian, whatever its subsampling lemma.
* :func:`gdp_floor` — a Gaussian dominating pair for every direction (GDP composes exactly over coordinates:
  G_{mu_1} x ... = G_{sqrt(sum mu_k^2)}) needs each coordinate's shifted pair (f, f(. - s)) dominated by G_{c s}. At
  the median test, as s -> 0, that forces c >= f(0) sqrt(2 pi) (f(0) = E[Y] / 2), so such an analysis cannot beat
  the subsampled Gaussian at noise multiplier 1 / (C f(0) sqrt(2 pi)).

Each floor is computed with dp_accounting's optimistic PLD or its RDP accountant on a fine order grid; a claim below
all of them and above the proven lower end cannot be settled by these methods.
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.accounting.lmo_noise import LmoNoise
from dpaudit.accounting.lmo_vector import fisher_information

PLD_GRID = 1e-5
RDP_ORDERS: tuple[float, ...] = tuple(float(a) for a in np.round(
    np.concatenate([np.arange(1.05, 10, 0.05), np.arange(10, 256.5, 0.5)]), 2))


def gaussian_pld_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                         pessimistic: bool) -> float:
    """epsilon(delta) of the Poisson-subsampled Gaussian (add/remove), dp_accounting PLD at grid 1e-5."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    d = pld.from_gaussian_mechanism(noise_multiplier, sampling_prob=sample_rate, pessimistic_estimate=pessimistic,
                                    value_discretization_interval=PLD_GRID, use_connect_dots=pessimistic)
    return float(d.self_compose(steps).get_epsilon_for_delta(delta))


def gaussian_rdp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """epsilon(delta) of the same mechanism through its exact RDP (dp_accounting) at :data:`RDP_ORDERS`."""
    import logging

    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)  # orders whose series does not converge are dropped, with a warning each
    try:
        acc = rdp.RdpAccountant(orders=list(RDP_ORDERS))
        acc.compose(dp_event.PoissonSampledDpEvent(sample_rate, dp_event.GaussianDpEvent(noise_multiplier)), steps)
        return float(acc.get_epsilon(delta))
    finally:
        absl.setLevel(level)


def fisher_multiplier(noise: LmoNoise, C: float) -> float:
    """The dense limit's Gaussian noise multiplier 1 / (C sqrt(I_f))."""
    return 1.0 / (C * math.sqrt(fisher_information(noise)))


def median_test_multiplier(noise: LmoNoise, C: float) -> float:
    """The largest noise multiplier a per-coordinate Gaussian domination can use: 1 / (C f(0) sqrt(2 pi))."""
    return 1.0 / (C * noise.mean() / 2 * math.sqrt(2 * math.pi))


def dense_limit(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float) -> float:
    return gaussian_pld_epsilon(fisher_multiplier(noise, C), sample_rate, steps, delta, pessimistic=True)


def rdp_floor(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float) -> float:
    return gaussian_rdp_epsilon(fisher_multiplier(noise, C), sample_rate, steps, delta)


def gdp_floor(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float) -> float:
    return gaussian_pld_epsilon(median_test_multiplier(noise, C), sample_rate, steps, delta, pessimistic=False)


def limits(ev, delta: float) -> dict:
    """Every quantity above for one per-coordinate LMO event of a card (``ev``: its event dict or object)."""
    def get(k: str):
        return ev.get(k) if isinstance(ev, dict) else getattr(ev, k)

    raw = get("noise")
    noise: LmoNoise = LmoNoise.from_dict(raw) if isinstance(raw, dict) else raw
    C, q, T = float(get("clipping_norm")), float(get("sample_rate")), int(get("steps"))
    return {"fisher_multiplier": fisher_multiplier(noise, C),
            "median_test_multiplier": median_test_multiplier(noise, C),
            "dense_limit_estimate": dense_limit(noise, C, q, T, delta),
            "rdp_floor": rdp_floor(noise, C, q, T, delta),
            "gdp_floor": gdp_floor(noise, C, q, T, delta)}
