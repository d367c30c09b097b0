"""dp_accounting privacy-loss-distribution accountant (pessimistic discretisation, add/remove)."""

import dp_accounting
from dp_accounting.pld import PLDAccountant

from dpaudit.accounting.events import SubsampledGaussian


def to_dp_event(events: list[SubsampledGaussian]) -> dp_accounting.DpEvent:
    parts = [
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(ev.sample_rate, dp_accounting.GaussianDpEvent(ev.noise_multiplier)),
            ev.steps,
        )
        for ev in events
    ]
    return parts[0] if len(parts) == 1 else dp_accounting.ComposedDpEvent(parts)


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    acc = PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(to_dp_event(events))
    return float(acc.get_epsilon(delta))
