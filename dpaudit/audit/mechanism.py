"""The mechanism an audit is about, as a typed value (docs/architecture.md, "The flow": the load step builds it
from the privacy card's typed events, once).

The per-step likelihood ratio of white-box canaries (:mod:`.whitebox_lr`) and the simulated limit of the
card's own mechanism (:mod:`.mechanism_limit`) are both about one subsampled Gaussian: a
:class:`GaussianMechanism`, or None with the reason there is none. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GaussianMechanism:
    """The card's one subsampled Gaussian with sigma > 0: rate q, noise multiplier sigma, T steps. ``alone`` is
    False when the card composes another phase with it (e.g. DP-FROST's private selection): the simulated
    limit is then not the card's mechanism and is left out."""

    sample_rate: float
    noise_multiplier: float
    steps: int
    alone: bool = True

    def params(self) -> dict:
        """The three numbers the statistics take (what a report records as ``statistic_params``)."""
        return {"sample_rate": self.sample_rate, "noise_multiplier": self.noise_multiplier, "steps": self.steps}


@dataclass(frozen=True)
class Audited:
    """What the load step found: the Gaussian, or None and ``why`` there is none."""

    gaussian: GaussianMechanism | None
    why: str = ""


NONE = Audited(None, "no privacy card mechanism")
