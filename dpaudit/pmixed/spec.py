"""The privacy parameters of a PMixED deployment (``pmixed.json``): validated without torch, so that reading a
run config never loads it (docs/architecture.md, Options)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property

from dpaudit.accounting import pmixed_rdp
from dpaudit.errors import DpauditError

SPEC = "pmixed.json"


@dataclass(frozen=True)
class PMixedSpec:
    """The privacy parameters of a deployment (Table 1 of the paper: eps_G = 8, delta = 1e-5, alpha = 3,
    T = 1024, N = 80, q = 0.03)."""

    n_models: int
    epsilon: float = 8.0  # eps_G
    delta: float = 1e-5
    alpha: int = 3
    queries: int = 1024  # T
    sample_rate: float = 0.03  # q
    reading: str = "code"  # how Thm C.4 is evaluated (dpaudit.accounting.pmixed_rdp.READINGS)
    partition_rule: str = "sha256(salt:user) mod N"
    partition_salt: str = "pmixed"
    max_len: int = 64

    def __post_init__(self):
        if isinstance(self.n_models, bool) or not isinstance(self.n_models, int) or self.n_models < 1:
            raise DpauditError(f"pmixed.n_models (N) must be an integer >= 1, got {self.n_models!r}")
        if not (isinstance(self.epsilon, (int, float)) and not isinstance(self.epsilon, bool) and 0 < self.epsilon < math.inf):
            raise DpauditError(f"pmixed epsilon_G must be a finite number > 0, got {self.epsilon!r}")
        if not 0 < self.delta < 1:
            raise DpauditError(f"pmixed delta must be in (0, 1), got {self.delta!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int) or self.alpha < 2:
            raise DpauditError(f"pmixed.alpha must be an integer >= 2 (the paper's Thm C.4 needs one), got {self.alpha!r}")
        if isinstance(self.queries, bool) or not isinstance(self.queries, int) or self.queries < 1:
            raise DpauditError(f"pmixed.queries (T) must be an integer >= 1, got {self.queries!r}")
        if not (isinstance(self.sample_rate, (int, float)) and not isinstance(self.sample_rate, bool) and 0 < self.sample_rate <= 1):
            raise DpauditError(f"pmixed.sample_rate (q) must be in (0, 1], got {self.sample_rate!r}")
        if self.reading not in pmixed_rdp.READINGS:
            raise DpauditError(f"pmixed.reading must be one of {', '.join(pmixed_rdp.READINGS)}, got {self.reading!r}")
        if self.per_query <= 0:
            raise DpauditError(f"eps_G = {self.epsilon} at delta = {self.delta} and alpha = {self.alpha} leaves no RDP "
                               f"budget (eps_RDP = {self.rdp_budget:.3g} <= 0); raise epsilon or delta")

    @property
    def rdp_budget(self) -> float:
        return pmixed_rdp.rdp_budget(self.epsilon, self.delta, self.alpha)

    @property
    def per_query(self) -> float:
        return self.rdp_budget / self.queries

    @cached_property
    def betas(self) -> tuple[float, ...]:
        """beta(n) for n = 1..N (the radius is recomputed for every realised |S_t|, as the paper's code)."""
        return tuple(pmixed_rdp.beta_star(self.alpha, self.sample_rate, n, self.per_query, self.reading)
                     for n in range(1, self.n_models + 1))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict, source: str = SPEC) -> PMixedSpec:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise DpauditError(f"{source}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**d)
