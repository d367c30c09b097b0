"""Opacus PRV accountant (Gopi et al. 2021); returns the upper end of its error interval."""

from opacus.accountants import PRVAccountant

from dpaudit.accounting.events import SubsampledGaussian


def epsilon(events: list[SubsampledGaussian], delta: float) -> float:
    acc = PRVAccountant()
    acc.history = [(ev.noise_multiplier, ev.sample_rate, ev.steps) for ev in events]
    return float(acc.get_epsilon(delta=delta, eps_error=0.01))
