"""The options of the methods that have their own, one config section each (docs/architecture.md, Options).

    [train.frost]            # DP-FROST (trainers/dp_frost.py)
    gamma = 0.25
    [train.lmo]              # LMO-DP (trainers/lmo_dp.py)
    accounting = "vector"
    [train.pmixed]           # PMixED (trainers/pmixed.py)
    models = 8

A variant overrides single keys with its own sub-table (``[variants.frost]`` after its ``[[variants]]``). A
section applies to its method only (:data:`SECTIONS`); setting it for another method is refused. Light: no
torch, so that reading a config never loads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpaudit import checks, options
from dpaudit.errors import DpauditError


def _one_of(section: str, key: str, v, allowed) -> None:
    if v not in allowed:
        raise DpauditError(f"train.{section}.{key} must be one of {', '.join(map(str, allowed))}, got {v!r}")


def _count(section: str, key: str, v, low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise DpauditError(f"train.{section}.{key} must be an integer >= {low}, got {v!r}")


def _in(section: str, key: str, v, lo: float, hi: float, lo_open: bool, hi_open: bool, what: str = "") -> None:
    ok = checks.number(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok:
        span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
        raise DpauditError(f"train.{section}.{key} must be in {span}{what}, got {v!r}")


@dataclass(frozen=True)
class FrostOptions:
    """DP-FROST (Hong et al. defaults)."""

    gamma: float = 0.25  # parameter budget: this fraction of all parameters
    selection: str = "psel"  # psel (T rounds) | single (one round) | random | pval (data-independent)
    rounds: int = 5  # T
    sample_rate: float = 0.02  # q_ps: Poisson rate of each selection round's sample
    rate_reading: str = "text"  # accounting rate of selection: text = q_ps, alg3 = 1 (Alg. 3)
    nu: float = 5.0  # early-selection threshold in standard deviations
    pgm: str = "dp_mgna"  # dp_mg | dp_mgn | dp_mgna
    alpha: int = 1  # norm order of the PGMs
    clipping_norm: float = 1.0  # c of the PGMs (scale-free at alpha = 1: nearly every example is clipped)
    r_eps: float = 0.9  # share of epsilon calibrating the training phase alone (ComputeSigma)
    reselect: int = 1  # K: select again before each of K equal training segments

    def __post_init__(self):
        _in("frost", "gamma", self.gamma, 0, 1, True, False)
        _count("frost", "rounds", self.rounds)
        _count("frost", "reselect", self.reselect)
        _in("frost", "r_eps", self.r_eps, 0, 1, True, True, " (the training phase's share of epsilon)")
        _in("frost", "sample_rate", self.sample_rate, 0, 1, True, False)
        _in("frost", "nu", self.nu, 0, math.inf, False, True)
        _in("frost", "clipping_norm", self.clipping_norm, 0, math.inf, True, True)
        _one_of("frost", "alpha", self.alpha, (1, 2))
        _one_of("frost", "selection", self.selection, options.FROST_SELECTIONS)
        _one_of("frost", "pgm", self.pgm, options.PGM_VARIANTS)
        _one_of("frost", "rate_reading", self.rate_reading, options.FROST_RATE_READINGS)


@dataclass(frozen=True)
class LmoOptions:
    """LMO-DP (Yang et al.): Laplace noise of random inverse scale Y."""

    accounting: str = "paper"  # which analysis calibrates the noise and writes the claim: paper | vector
    noise: dict | None = None  # the shape of Y (a1, a2, a3, gamma_k, ...); None = Alg. 3's search (paper)
    fixed: bool = False  # control: a fixed Laplace scale (Y a point mass) instead of a mixture
    draw: str = "per_coordinate"  # one Y per coordinate, or one per step for all coordinates
    form: str = "sum"  # Y as the weighted sum of its parts, or one part picked with probability a_k
    objective: str = "mean_abs"  # what the search minimises: E|Z| or Var Z

    def __post_init__(self):
        _one_of("lmo", "accounting", self.accounting, options.LMO_ACCOUNTINGS)
        _one_of("lmo", "draw", self.draw, options.LMO_DRAWS)
        _one_of("lmo", "form", self.form, options.LMO_FORMS)
        _one_of("lmo", "objective", self.objective, options.LMO_OBJECTIVES)
        if not isinstance(self.fixed, bool):
            raise DpauditError(f"train.lmo.fixed must be true or false, got {self.fixed!r}")
        if self.noise is not None:
            from dpaudit.accounting.lmo_noise import LmoNoise

            if self.fixed:
                raise DpauditError("train.lmo.fixed = true is a fixed Laplace scale; remove train.lmo.noise")
            LmoNoise.from_dict({**self.noise, "form": self.noise.get("form", self.form)})
        if self.accounting == "vector" and self.noise is None and not self.fixed:
            raise DpauditError("train.lmo.accounting = 'vector' calibrates a given shape: set train.lmo.noise (e.g. "
                               "from `dpaudit lmo search`) or train.lmo.fixed = true")


@dataclass(frozen=True)
class PMixedOptions:
    """PMixED (Flemings et al.): N adapters trained non-privately on hash partitions of the users; the variant's
    target_epsilon and delta are eps_G and delta of the deployment's T queries."""

    models: int = 8  # N
    queries: int = 1024  # T, the query budget
    sample_rate: float = 0.03  # q, the Poisson rate of models per query
    alpha: int = 3  # the one Rényi order of the analysis
    reading: str = "code"  # how Thm C.4 is evaluated: code (base loss at alpha) | theorem (at k)


# section name -> (its options, the method it belongs to)
SECTIONS = {"frost": (FrostOptions, "dp_frost"), "lmo": (LmoOptions, "lmo_dp"), "pmixed": (PMixedOptions, "pmixed")}
