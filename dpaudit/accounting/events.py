"""Privacy events: immutable descriptions of mechanisms that accountants compose.

Modelled on dp_accounting's DpEvent. A privacy card's ``mechanism.events`` is a list of these in
JSON form; the list is composed (phase after phase). Stability rules: fields are never removed, new
fields are optional with a default, meanings never change.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass

from dpaudit.checks import number
from dpaudit.errors import DpauditError
from dpaudit.options import LMO_DRAWS, SAMPLERS


@dataclass(frozen=True)
class SubsampledGaussian:
    """``steps`` rounds of the Gaussian mechanism (noise multiplier sigma, sensitivity 1 after
    clipping) on a batch drawn at rate ``sample_rate``; ``sampler`` says how batches were really drawn."""

    sample_rate: float
    noise_multiplier: float
    steps: int
    sampler: str = "poisson"
    type: str = "subsampled_gaussian"

    def __post_init__(self):
        validate_mechanism(self.noise_multiplier, self.sample_rate, self.steps)
        if self.sampler not in SAMPLERS:
            raise DpauditError(f"unknown sampler {self.sampler!r}; use one of {', '.join(SAMPLERS)}")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SubsampledLaplaceMixture:
    """``steps`` rounds of LMO-DP's noise (Yang et al.): Laplace of random scale 1 / Y on every coordinate of a
    clipped sum (L2 norm <= ``clipping_norm``), on a batch drawn at rate ``sample_rate``. ``noise`` holds the
    law of Y (:class:`dpaudit.accounting.lmo_noise.LmoNoise` as a dict); ``draw`` says whether one Y serves
    every coordinate of a step (``per_step``) or each coordinate has its own (``per_coordinate``);
    ``dimension`` is the number of noised coordinates."""

    sample_rate: float
    steps: int
    noise: dict
    clipping_norm: float
    draw: str = "per_step"
    dimension: int | None = None
    sampler: str = "poisson"
    type: str = "subsampled_laplace_mixture"

    def __post_init__(self):
        from dpaudit.accounting.lmo_noise import LmoNoise

        validate_mechanism(1.0, self.sample_rate, self.steps)
        LmoNoise.from_dict(self.noise)
        if not number(self.clipping_norm) or not 0 < self.clipping_norm < math.inf:
            raise DpauditError(f"clipping_norm must be > 0, got {self.clipping_norm!r}")
        if self.draw not in LMO_DRAWS:
            raise DpauditError(f"LMO draw must be one of {', '.join(LMO_DRAWS)}, got {self.draw!r}")
        if self.sampler not in SAMPLERS:
            raise DpauditError(f"unknown sampler {self.sampler!r}; use one of {', '.join(SAMPLERS)}")
        _check_dimension(self.dimension)

    def __hash__(self):
        return hash((self.sample_rate, self.steps, tuple(sorted(self.noise.items())), self.clipping_norm, self.draw))

    def to_dict(self) -> dict:
        return asdict(self)


MAX_DIMENSION = 10 ** 12


def _check_dimension(dimension) -> None:
    if dimension is not None and (isinstance(dimension, bool) or not isinstance(dimension, int)
                                  or not 1 <= dimension <= MAX_DIMENSION):
        raise DpauditError(f"LMO dimension (the number of noised coordinates) must be an integer from 1 to "
                           f"{MAX_DIMENSION:.0e}, or absent, got {dimension!r}")


@dataclass(frozen=True)
class PMixedPrediction:
    """``queries`` answers of PMixED (Flemings et al.): ``n_models`` models fine-tuned on disjoint partitions,
    each query mixing a Poisson(``sample_rate``) subset of them towards a public model at one Rényi order
    ``alpha``, calibrated so that each query is claimed ``per_query_rdp``-RDP (``reading``: how the paper's
    subsampling theorem was evaluated). The privacy unit is one partition (add/remove one model). No
    accountant of dpaudit analyses it (the claim rests on the paper's own per-query bound); the deployment's
    exact per-query divergences are audited instead (dpaudit.pmixed.audit)."""

    n_models: int
    queries: int
    sample_rate: float
    alpha: int
    per_query_rdp: float
    reading: str = "code"
    sampler: str = "poisson"
    type: str = "pmixed_prediction"

    def __post_init__(self):
        for k in ("n_models", "queries", "alpha"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if k == "alpha" else 1):
                raise DpauditError(f"pmixed_prediction.{k} must be an integer >= {2 if k == 'alpha' else 1}, got {v!r}")
        if not number(self.sample_rate) or not 0 < self.sample_rate <= 1:
            raise DpauditError(f"pmixed_prediction.sample_rate must be in (0, 1], got {self.sample_rate!r}")
        if not number(self.per_query_rdp) or not 0 < self.per_query_rdp < math.inf:
            raise DpauditError(f"pmixed_prediction.per_query_rdp must be > 0, got {self.per_query_rdp!r}")

    def to_dict(self) -> dict:
        return asdict(self)


EVENT_TYPES = {"subsampled_gaussian": SubsampledGaussian, "subsampled_laplace_mixture": SubsampledLaplaceMixture,
               "pmixed_prediction": PMixedPrediction}


def event_from_dict(d: dict):
    if not isinstance(d, dict) or "type" not in d:
        raise DpauditError("privacy event without a 'type' field; each event needs e.g. "
                           "'type': 'subsampled_gaussian'")
    cls = EVENT_TYPES.get(d["type"]) if isinstance(d["type"], str) else None
    if cls is None:
        raise DpauditError(f"unknown privacy event type {d['type']!r}; known: {', '.join(EVENT_TYPES)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    required = [f for f, spec in fields.items() if spec.default is dataclasses.MISSING]
    missing = [f for f in required if f not in d]
    if missing:
        raise DpauditError(f"privacy event {d['type']!r} is missing field(s) {', '.join(missing)}; "
                           f"add them to the card's mechanism.events entry")
    return cls(**{k: v for k, v in d.items() if k in fields})


class NotApplicable(DpauditError):
    """An accountant has no analysis for this mechanism (its sampler or neighbouring relation)."""


def require(events: list, samplers: tuple, name: str, relation: str, relations: tuple = ("add_remove",),
            kinds: tuple = ("subsampled_gaussian",)) -> None:
    """Raise :class:`NotApplicable` unless ``name`` analyses every event's kind and sampler under ``relation``."""
    other = sorted({ev.type for ev in events} - set(kinds))
    if other:
        raise NotApplicable(f"{name} analyses {' and '.join(kinds)} events only, not {other[0]}")
    if relation not in relations:
        raise NotApplicable(f"{name} analyses {' or '.join(relations)} neighbours only, not {relation}")
    bad = sorted({ev.sampler for ev in events} - set(samplers))
    if bad:
        raise NotApplicable(f"{name} analyses {' or '.join(samplers)} sampling only, not {bad[0]}")


SIGMA_MIN = 0.01  # below this every grid accountant needs tens of GB (and RDP divides by ~0)
SIGMA_MAX = 1e6  # above this epsilon is 0 to every accountant's resolution; from ~1e8 Opacus' RDP and PRV fail to
# subtract logs and from ~1e155 sigma ** 2 overflows in all four: refused in one line rather than a crash
SAMPLE_RATE_MIN = 1e-300  # below this (subnormal floats) dp_accounting's PLD cannot bound the privacy loss's support
GRID_SIGMA_MIN = 0.1  # PLD and PRV below this: grids of GBs and minutes (PRV > 60 s at 0.07); RDP answers alone
MAX_STEPS = 10 ** 8  # beyond this the accountants' compositions run for hours; no training run takes as many
MIN_DELTA = 1e-30  # below this the PLD/PRV discretisations cannot resolve delta (and no claim uses one)


def validate_mechanism(sigma: float, q: float, steps: int) -> None:
    if not number(sigma) or not 0 < sigma < math.inf:
        raise DpauditError(f"noise multiplier sigma must be a finite number > 0, got {sigma}")
    if sigma < SIGMA_MIN:
        raise DpauditError(f"noise multiplier sigma = {sigma:g} is below {SIGMA_MIN:g}: so little noise has no useful "
                           "epsilon and no accountant can compute one in memory; claim no epsilon for such a model")
    if sigma > SIGMA_MAX:
        raise DpauditError(f"noise multiplier sigma = {sigma:g} is above {SIGMA_MAX:g}: epsilon is 0 there to every "
                           "accountant's resolution and their arithmetic overflows; check the value (the noise standard "
                           "deviation divided by the clipping norm)")
    if not number(q) or not 0 < q <= 1:
        raise DpauditError(f"sample rate q must be in (0, 1], got {q}")
    if q < SAMPLE_RATE_MIN:
        raise DpauditError(f"sample rate q = {q:g} is below {SAMPLE_RATE_MIN:g}, where the accountants' floating point "
                           "fails; check the value (q is the batch size over the dataset size)")
    if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
        raise DpauditError(f"steps must be an integer from 1 to {MAX_STEPS:.0e}, got {steps}")


def validate_delta(delta: float) -> None:
    if not number(delta) or not MIN_DELTA <= delta < 1:
        raise DpauditError(f"delta must be in [{MIN_DELTA:g}, 1), got {delta}")


GRID_ACCOUNTANTS = ("prv", "pld")


def grid_guard(name: str, events) -> None:
    """PRV and PLD discretise the privacy loss on a grid whose size grows as sigma shrinks: below GRID_SIGMA_MIN it
    needs GBs and minutes, so they decline (NotApplicable) and the RDP accountants answer."""
    small = min((getattr(e, "noise_multiplier", math.inf) for e in events), default=math.inf)
    if name in GRID_ACCOUNTANTS and small < GRID_SIGMA_MIN:
        raise NotApplicable(f"{name} needs a grid of GBs at sigma = {small:g} < {GRID_SIGMA_MIN:g}; the RDP "
                            "accountants give the upper value")


@dataclass(frozen=True)
class AccountingResult:
    """One accountant's answer at ``delta``: ``epsilon`` its upper value (the true epsilon is at most this; None: a
    lower value only), ``lower`` its lower value where it has one (the true epsilon is at least this)."""

    accountant: str
    epsilon: float | None
    delta: float
    lower: float | None = None
    relation: str = "add_remove"
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)
