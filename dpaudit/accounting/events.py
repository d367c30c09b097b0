"""Privacy events: immutable descriptions of mechanisms that accountants compose.

Modelled on dp_accounting's DpEvent. A privacy card's ``mechanism.events`` is a list of these in
JSON form; the list is composed (phase after phase). Stability rules: fields are never removed, new
fields are optional with a default, meanings never change.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

from dpaudit.errors import DpauditError
from dpaudit.options import SAMPLERS


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


EVENT_TYPES = {"subsampled_gaussian": SubsampledGaussian}


def event_from_dict(d: dict):
    if not isinstance(d, dict) or "type" not in d:
        raise DpauditError("privacy event without a 'type' field; each event needs e.g. "
                           "'type': 'subsampled_gaussian'")
    cls = EVENT_TYPES.get(d["type"])
    if cls is None:
        raise DpauditError(f"unknown privacy event type {d['type']!r}; known: {', '.join(EVENT_TYPES)}")
    fields = cls.__dataclass_fields__
    required = [f for f, spec in fields.items() if spec.default is dataclasses.MISSING]
    missing = [f for f in required if f not in d]
    if missing:
        raise DpauditError(f"privacy event {d['type']!r} is missing field(s) {', '.join(missing)}; "
                           f"add them to the card's mechanism.events entry")
    return cls(**{k: v for k, v in d.items() if k in fields})


class NotApplicable(DpauditError):
    """An accountant has no analysis for this mechanism (its sampler or neighbouring relation)."""


def require(events: list, samplers: tuple, name: str, relation: str, relations: tuple = ("add_remove",)) -> None:
    """Raise :class:`NotApplicable` unless ``name`` analyses every event's sampler under ``relation``."""
    if relation not in relations:
        raise NotApplicable(f"{name} analyses {' or '.join(relations)} neighbours only, not {relation}")
    bad = sorted({ev.sampler for ev in events} - set(samplers))
    if bad:
        raise NotApplicable(f"{name} analyses {' or '.join(samplers)} sampling only, not {bad[0]}")


def validate_mechanism(sigma: float, q: float, steps: int) -> None:
    if not isinstance(sigma, (int, float)) or not sigma > 0:
        raise DpauditError(f"noise multiplier sigma must be > 0, got {sigma}")
    if not isinstance(q, (int, float)) or not 0 < q <= 1:
        raise DpauditError(f"sample rate q must be in (0, 1], got {q}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise DpauditError(f"steps must be an integer >= 1, got {steps}")


def validate_delta(delta: float) -> None:
    if not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise DpauditError(f"delta must be in (0, 1), got {delta}")
