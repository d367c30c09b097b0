"""What a method will do, before any training: the one question the dry run asks of a method
(``trainers.methods.Method.plan``, docs/architecture.md "Extension points"). A method answers with a
:class:`MechanismPlan` computed the way its ``fit`` will compute it (the same sampling plan, the same
calibration), so ``dpaudit run --dry-run`` has no branch per method and never prints another method's σ.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpaudit import accounting
from dpaudit.trainers import engine


@dataclass(frozen=True)
class MechanismPlan:
    """``unit`` what one privacy unit is; ``units`` how many the mechanism samples from; ``batch`` the expected
    batch (the divisor); ``noise`` what noise, in words (e.g. "σ = 0.97 (prv)"); ``claim`` the ε the card will
    claim (None: non-private); ``memory_engine`` the engine config the memory estimate reads (None: the
    variant's own)."""

    unit: str
    units: int
    batch: int
    sample_rate: float | None
    steps: int
    delta: float | None
    noise: str
    claim: float | None
    memory_engine: object | None = None


def gaussian_records(eng, n_records: int, unit: str = "record", canary_rate: float | None = None) -> MechanismPlan:
    """Record-level training on ``n_records`` with one Gaussian calibrated to the target (the engine's own
    calibration); with ``canary_rate`` every record is accounted at the larger of it and q, as the card is."""
    p = engine.record_plan(n_records, eng)
    if not eng.private:
        return MechanismPlan(unit, n_records, p.batch, p.sample_rate, p.steps, p.delta, "none", None)
    q = engine.card_rate(p.sample_rate, canary_rate)  # as engine.train accounts and calibrates
    sigma = engine.calibrated_sigma(eng, p.delta, q, p.steps)
    noise = f"σ = {sigma:.4g} ({eng.accountant})" + (
        "" if canary_rate is None else f"; canaries sampled at {canary_rate:g}, every record accounted at q = {q:.4g}")
    claim = accounting.epsilon_function(eng.accountant)([accounting.SubsampledGaussian(q, sigma, p.steps)], p.delta)
    return MechanismPlan(unit, n_records, p.batch, p.sample_rate, p.steps, p.delta, noise, claim)
