"""The probe's settings as one frozen value (:class:`ProbeSettings`), shared by every adapter: ``attach_probe``
(Opacus), :class:`dpaudit.probe.Probe` (dpaudit's trainers), ``functional_probe`` (a hand-written step) and the
Hugging Face ``ProbeCallback``. Each adapter takes the value or the same names as keywords (:meth:`ProbeSettings.of`),
so a setting added here reaches all four, and every setting is checked here, once, in one line each."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from dpaudit import checks
from dpaudit.errors import DpauditError

COORDINATES = ("block", "model")  # a dedicated parameter block, or the model's trainable coordinates
ON_FAIL = ("warn", "raise", None)  # what a check that fails while training does
SAMPLERS = ("poisson", "shuffle")  # Opacus' default, or fixed-size batches (poisson_sampling=False)


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe plants and checks, fixed before training.

    Attributes:
        sample_rate: The card's sampling rate q: the canaries are sampled at it, and the batch sizes tested against
            it (``loader.sample_rate`` of the loader ``make_private`` returned).
        m: White-box gradient canaries (at least 2).
        seed: Seeds the canaries' directions and their sampling.
        kind: ``"dirac"`` (one coordinate each), or another of ``options.GRADIENT_CANARY_KINDS``.
        coordinates: ``"block"`` (a dedicated parameter block the forward never reads) or ``"model"`` (the
            model's trainable coordinates).
        clip_canaries: Canaries that test the clipping (on the block only).
        record_steps: Keep every step's projections (True) or only O(m) online sums (False, for m of 10^5 and more:
            the likelihood ratio is accumulated at the optimizer's sigma, which the card must then state).
        on_fail: What a check that fails while training does: ``"warn"``, ``"raise"`` or None.
        dataset_size: N, the records (or users) the loop samples from, so the batch sizes are tested while training
            runs and the card's N is checked; None: not tested online.
        sampler: ``"poisson"`` or ``"shuffle"``, as the card states.

    Raises:
        DpauditError: A setting out of range, in one line naming it.
    """

    sample_rate: float
    m: int = 1000
    seed: int = 0
    kind: str = "dirac"
    coordinates: str = "block"
    clip_canaries: int = 32
    record_steps: bool = True
    on_fail: str | None = "warn"
    dataset_size: int | None = None
    sampler: str = "poisson"

    def __post_init__(self):
        from dpaudit.options import GRADIENT_CANARY_KINDS

        q = self.sample_rate
        if isinstance(q, bool) or not (isinstance(q, (int, float)) and 0 < q <= 1):
            raise DpauditError(f"the probe's sample_rate must be the card's q in (0, 1], got {q!r}")
        if isinstance(self.m, bool) or not isinstance(self.m, int) or self.m < 2:
            raise DpauditError(f"the probe needs m >= 2 gradient canaries (an integer), got {self.m!r}")
        checks.seed("the probe's seed", self.seed)  # a negative one crashed NumPy's generator when it attached
        if self.kind not in GRADIENT_CANARY_KINDS:
            raise DpauditError(f"gradient canary kind must be one of {', '.join(GRADIENT_CANARY_KINDS)}, got "
                               f"{self.kind!r}")
        if self.coordinates not in COORDINATES:
            raise DpauditError(f"coordinates must be one of {', '.join(COORDINATES)}, got {self.coordinates!r}")
        if isinstance(self.clip_canaries, bool) or not isinstance(self.clip_canaries, int) or self.clip_canaries < 0:
            raise DpauditError(f"clip_canaries must be an integer >= 0, got {self.clip_canaries!r}")
        if not isinstance(self.record_steps, bool):
            raise DpauditError(f"record_steps must be True or False, got {self.record_steps!r}")
        if self.on_fail not in ON_FAIL:
            raise DpauditError(f"on_fail must be 'warn', 'raise' or None, got {self.on_fail!r}")
        n = self.dataset_size
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n <= 0):
            raise DpauditError(f"dataset_size must be the number of records (or users) N > 0, got {n!r}")
        if self.sampler not in SAMPLERS:
            raise DpauditError(f"sampler must be 'poisson' (Opacus' default) or 'shuffle' (fixed-size batches, "
                               f"poisson_sampling=False), as the card states; got {self.sampler!r}")

    @classmethod
    def of(cls, settings: ProbeSettings | None = None, options: dict | None = None) -> ProbeSettings:
        """``settings`` with ``options`` (the same names as keywords) applied, or a new value from ``options``
        alone.

        Raises:
            DpauditError: An option that is not a setting, or neither settings nor a sample rate given.
        """
        options = dict(options or {})
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise DpauditError(f"unknown probe setting {unknown[0]!r}; the settings are {', '.join(names)}")
        if settings is None:
            if "sample_rate" not in options:
                raise DpauditError("the probe needs sample_rate (the card's q), or settings=ProbeSettings(...)")
            return cls(**options)
        if not isinstance(settings, cls):
            raise DpauditError(f"settings must be a dpaudit.probe.ProbeSettings, got {type(settings).__name__}")
        return dataclasses.replace(settings, **options) if options else settings
