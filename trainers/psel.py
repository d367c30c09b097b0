"""DP-FROST's private selection of partitions: PSEL over T rounds with the PGM-EST estimate (Hong et al., §4.5,
App. A Lemmas 4-6, App. C Alg. 4-5), and the data-independent baselines.

Round t draws a Poisson sample at rate q_ps, computes the PGMs of the partitions not selected yet (R) and
releases them with Gaussian noise sigma_ps x Delta_t (Delta_t the PGM sensitivity over R). The released
values follow vt[t, i] = lambda_t v_i + N(0, sigma_ps^2 Delta_t^2) with v_i the PGM on the whole data and
lambda_1 = q_ps; :func:`pgm_est` maximises that likelihood by the closed-form alternating updates of Lemmas 5
(v) and 4 (lambda), and Lemma 6 gives Var(v_i) = sigma_ps^2 / sum_j lambda_j^2 / Delta_j^2. The listing's typos
are not followed (Alg. 5: sum v_i^2 / Delta^2 in the lambda update; the first round returns vt / q_ps;
Lemma 6's variance, not Alg. 4's). Selection in round t (budget t B / T, all of B in the last): partitions by
descending estimate, each taken when it fits in the budget and (last round, or) its estimate exceeds
mu_thres + nu sd_i, mu_thres being the estimate below which the partitions that will stay frozen lie. A
partition that does not fit is skipped, not a stop: the listing stops there, which leaves the budget unused
whenever one large partition (an embedding table) ranks first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.trainers import pgm
from dpaudit.trainers.partitions import Partition


def pgm_est(vt: np.ndarray, deltas: np.ndarray, lam1: float, iterations: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """(v, lambda): the maximum-likelihood PGMs and round scales. ``vt`` is (rounds, partitions) with NaN where a
    partition was no longer in R; ``deltas`` the sensitivity of each round; lambda_1 = ``lam1`` is fixed."""
    vt = np.asarray(vt, dtype=float)
    rounds, n = vt.shape
    seen = ~np.isnan(vt)
    if not seen[0].all():
        raise ValueError("every partition is in R in the first round")
    w = 1.0 / np.asarray(deltas, dtype=float) ** 2  # 1 / Delta_j^2
    x = np.where(seen, vt, 0.0)
    lam = np.ones(rounds)
    lam[0] = lam1
    v = x[0] / lam1
    if rounds == 1:
        return v, lam
    for _ in range(iterations):
        # Lemma 5: v_i = sum_j vt_ji lam_j / D_j^2 / sum_j lam_j^2 / D_j^2 over the rounds that saw i
        v = (seen * x * (lam * w)[:, None]).sum(0) / (seen * (lam ** 2 * w)[:, None]).sum(0)
        # Lemma 4: lam_j = sum_i vt_ji v_i / D_j^2 / sum_i v_i^2 / D_j^2 over i in R_{j-1} (j >= 2)
        num = (seen * x * v[None, :]).sum(1)
        den = (seen * v[None, :] ** 2).sum(1)
        lam[1:] = np.where(den[1:] > 0, num[1:] / np.maximum(den[1:], 1e-300), lam[1:])
    return v, lam


def pgm_sd(vt: np.ndarray, deltas: np.ndarray, lam: np.ndarray, sigma: float) -> np.ndarray:
    """Lemma 6: the standard deviation of each estimate, sigma_ps / sqrt(sum_j lambda_j^2 / Delta_j^2)."""
    seen = ~np.isnan(np.asarray(vt, dtype=float))
    w = (np.asarray(lam) ** 2 / np.asarray(deltas, dtype=float) ** 2)[:, None]
    return sigma / np.sqrt((seen * w).sum(0))


@dataclass(frozen=True)
class SelectionConfig:
    budget: int  # parameters the selection may choose (partitions.budget)
    rounds: int = 5  # T
    sample_rate: float = 0.02  # q_ps: Poisson rate of each round's sample
    sigma: float = 0.0  # sigma_ps: noise multiplier of the released PGMs (0 = no noise, non-private)
    nu: float = 5.0  # threshold, in standard deviations, for an early (round t < T) selection
    variant: str = "dp_mgna"
    alpha: float = 1
    clipping_norm: float = 1.0  # c (the paper never states it; with alpha = 1 nearly every example is clipped)
    iterations: int = 1000  # J of PGM-EST
    seed: int = 0

    def __post_init__(self):
        pgm.check(self.variant, self.alpha)
        if not isinstance(self.rounds, int) or isinstance(self.rounds, bool) or self.rounds < 1:
            raise DpauditError(f"train.frost.rounds (T) must be an integer >= 1, got {self.rounds!r}")
        if not 0 < self.sample_rate <= 1:
            raise DpauditError(f"train.frost.sample_rate (q_ps) must be in (0, 1], got {self.sample_rate!r}")
        if self.sigma < 0 or self.nu < 0 or not self.clipping_norm > 0:
            raise DpauditError("selection sigma and nu must be >= 0 and its clipping norm > 0")


@dataclass
class Selection:
    chosen: list[str]  # partition names, in the order chosen
    rounds: list[dict] = field(default_factory=list)  # per round: Delta, released PGMs, estimates, chosen

    def to_dict(self) -> dict:
        return {"chosen": self.chosen, "rounds": self.rounds}


def psel(noisy_pgms, parts: list[Partition], cfg: SelectionConfig) -> Selection:
    """PSEL. ``noisy_pgms(remaining, round) -> (released values, Delta)`` computes and releases the PGMs of the
    partitions still in R on a fresh Poisson sample (:func:`release` does it for a model)."""
    remaining = list(parts)
    all_names = [p.name for p in parts]
    index = {n: i for i, n in enumerate(all_names)}
    sizes = np.array([p.size for p in parts])
    total = int(sizes.sum())
    vt_rows, deltas, chosen = [], [], []
    out = Selection([])
    used = 0
    for t in range(1, cfg.rounds + 1):
        if not remaining:
            break
        values, delta = noisy_pgms(remaining, t)
        row = np.full(len(parts), np.nan)
        row[[index[p.name] for p in remaining]] = values
        vt_rows.append(row)
        deltas.append(delta)
        vt = np.array(vt_rows)
        v, lam = pgm_est(vt[:, [index[p.name] for p in parts]], np.array(deltas), cfg.sample_rate, cfg.iterations)
        sd = pgm_sd(vt, np.array(deltas), lam, cfg.sigma) if cfg.sigma > 0 else np.zeros(len(parts))
        last = t == cfg.rounds
        budget_t = cfg.budget if last else int(t * cfg.budget / cfg.rounds)
        r_idx = [index[p.name] for p in remaining]
        picked = _pick(all_names, sizes, v, sd, r_idx, total - cfg.budget, budget_t, used, cfg.nu, last)
        used += int(sum(sizes[index[n]] for n in picked))
        chosen += picked
        out.rounds.append({"round": t, "delta": float(delta), "released": [float(x) for x in values],
                           "remaining": [p.name for p in remaining], "estimate": [float(v[i]) for i in r_idx],
                           "chosen": picked})
        remaining = [p for p in remaining if p.name not in set(picked)]
    out.chosen = chosen
    return out


def _pick(names, sizes, v, sd, r_idx, frozen_target, budget_t, used, nu, last) -> list[str]:
    """One round's choice among the partitions ``r_idx`` still in R; ``frozen_target`` is how many selectable
    parameters stay frozen in the end (all of them minus the budget).
    Over 8 parameters: one round's state of the selection (Alg. 2's arrays and counters); internal."""
    order = sorted(r_idx, key=lambda i: v[i])  # ascending
    cum, thres = 0, np.inf
    for i in order:
        cum += sizes[i]
        if cum >= frozen_target:
            thres = v[i]
            break
    picked = []
    for i in reversed(order):
        if used + sizes[i] > budget_t:
            continue
        if last or v[i] > thres + nu * sd[i]:
            picked.append(names[i])
            used += sizes[i]
    return picked


def release(model, sample_batches, cfg: SelectionConfig, generator: torch.Generator, choices=None):
    """``noisy_pgms`` for :func:`psel` on a model: the PGMs of R on the round's Poisson sample
    (``sample_batches(t)`` yields its (ids, mask, targets) batches), released by :func:`gaussian_release`."""
    return gaussian_release(lambda remaining, t: pgm.pgms(model, sample_batches(t), remaining, cfg.variant, cfg.alpha,
                                                          cfg.clipping_norm, choices), cfg, generator)


def gaussian_release(pgm_fn, cfg: SelectionConfig, generator: torch.Generator):
    """``noisy_pgms`` from ``pgm_fn(remaining, t) -> tensor of PGMs``: each value plus N(0, (sigma_ps Delta_t)^2)
    drawn with ``generator`` on the PGMs' device, Delta_t the sensitivity over R. Returns (floats, Delta_t)."""

    def noisy(remaining: list[Partition], t: int):
        mu = pgm_fn(remaining, t)
        delta = pgm.sensitivity(cfg.variant, cfg.clipping_norm, cfg.alpha, remaining)
        if cfg.sigma > 0:
            mu = mu + torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype) * cfg.sigma * delta
        return mu.detach().cpu().double().numpy(), delta

    return noisy


def baseline(parts: list[Partition], budget: int, rule: str, model=None, seed: int = 0) -> list[str]:
    """Data-independent selections (no privacy cost): ``random`` partitions in a seeded random order, or
    ``pval`` — the partitions of largest mean |theta| (Luo et al.'s magnitude rule, at partition granularity:
    the engine's trainable axis is whole parameters). Both fill the budget, skipping what does not fit."""
    if rule == "random":
        order = list(np.random.default_rng([seed, 41]).permutation(len(parts)))
    elif rule == "pval":
        named = dict(model.named_parameters())
        mag = [float(sum(named[n].detach().abs().sum() for n in p.params)) / p.size for p in parts]
        order = list(np.argsort(mag)[::-1])
    else:
        raise DpauditError(f"unknown selection baseline {rule!r}; use random or pval")
    picked, used = [], 0
    for i in order:
        if used + parts[i].size <= budget:
            picked.append(parts[i].name)
            used += parts[i].size
    return picked
