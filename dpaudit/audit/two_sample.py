"""The white-box audit past thresholding at k guesses: a two-sample threshold test of independent canaries.

The one-run analyses (:mod:`dpaudit.audit.one_run`, :mod:`dpaudit.audit.fdp`) are valid whatever the canaries
share, and pay for it: their bound is capped by the guesses (the ceiling) and, at m = 400,000 on demo_lm's ε = 8
card, the median audit of the card's own mechanism shows 4.24. White-box Dirac canaries give more to read. Each
sits on its own coordinate, the mechanism samples it with its own coin at every step and adds noise drawn
independently per coordinate, so the canaries' scores are **independent**: the inserted ones are n_in draws from
one law P, the held-out ones n_out draws from another, Q. Each score is a function of the released updates, so
(P, Q) inherit the claim: for every threshold t, P(s > t) <= e^eps Q(s > t) + delta. With t fixed before the
scores are read, the counts above it are binomial, and

    eps_lb = log((TPR_low - delta) / FPR_high)

with one-sided Clopper-Pearson bounds at (1 - confidence) / 2 each (Bonferroni over the two), is below the true
eps with probability >= confidence. This is the many-run audit (Jagielski et al. 2020; Nasr et al. 2023) with
canaries as the runs, which the independence makes legitimate; nothing is assumed about the mechanism's shape
(the Gaussian reading of the same counts would be an estimate, and is not made here).

What it assumes, stated wherever it is reported: the canaries' scores are independent given their coins, as the
mechanism written on the card makes them for Dirac canaries on a block the model never reads (independent noise
per coordinate, independent sampling, no record's gradient there). On the model's own coordinates the records'
gradients, and the model state they share, tie the canaries' scores together, so the evaluation reports the test
for block canaries only. A mechanism that correlates its noise across coordinates breaks the assumption too; its
claim is not tested here, only the card's mechanism is. The threshold comes from one of two places, neither of which reads the audited scores:

* :func:`plan` — the card's own mechanism simulated before training (the scores' law under the claim): the
  false-positive rate on a grid whose median simulated bound is largest, and its threshold (the simulated
  held-out law's quantile). ``dpaudit audit plan`` prints it; the evaluation would fix it like the guesses.
* :func:`tuned` — a seeded half of each class tunes it, the other half is audited (scores without a card).

Validity and power are simulated in tests/audit/test_two_sample.py (null, randomised response, Gaussian; ≤ 5% of
runs above the truth at every m tested). Pure NumPy/SciPy.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from dpaudit.audit.many_run import cp_lower, cp_upper

FPR_GRID = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
PLAN_BUDGET = 2e8  # normal draws for the plan's simulated pools (seconds on one core; cached per card)
MIN_TAIL = 20  # simulated held-out scores a planned threshold's tail must hold
PLAN_DRAWS = 2001  # binomial draws of (tp, fp) per grid point for the median bound
ASSUMPTION = ("the canaries' scores are independent (white-box Dirac canaries on a block no record's gradient "
              "reaches: each on its own coordinate, with its own coin, under noise drawn per coordinate)")
MIN_POOL, POOL_PER_CANARY = 20_000, 50  # a pool 50 x the larger class resolves the FPRs its counts can
MAX_POOL = 1_000_000  # simulated scores per class at most (few steps would otherwise get tens of millions)


@dataclass(frozen=True)
class TwoSampleResult:
    """The bound at one threshold: ``tp`` of ``n_in`` inserted and ``fp`` of ``n_out`` held-out scores above it."""

    epsilon_lb: float
    ceiling: float
    threshold: float
    tp: int
    n_in: int
    fp: int
    n_out: int
    tpr_low: float
    fpr_high: float
    delta: float
    confidence: float
    threshold_rule: str
    assumption: str = ASSUMPTION

    def to_dict(self) -> dict:
        return asdict(self)


def epsilon_from_counts(tp: int, n_in: int, fp: int, n_out: int, delta: float, confidence: float) -> float:
    """log((TPR_low - delta) / FPR_high), one-sided Clopper-Pearson at (1 - confidence) / 2 each; 0 when the
    inserted canaries' rate is not shown above delta."""
    _check(n_in, n_out, delta, confidence)
    a = (1.0 - confidence) / 2.0
    return _epsilon(cp_lower(int(tp), int(n_in), a), cp_upper(int(fp), int(n_out), a), delta)


def _epsilon(tpr_low: float, fpr_high: float, delta: float) -> float:
    return max(0.0, math.log((tpr_low - delta) / fpr_high)) if tpr_low > delta else 0.0


def ceiling(n_in: int, n_out: int, delta: float, confidence: float) -> float:
    """The most the test can show with these sizes (every inserted score above the threshold, no held-out one)."""
    return epsilon_from_counts(n_in, n_in, 0, n_out, delta, confidence)


def bound_at(inserted, held_out, threshold: float, delta: float, confidence: float = 0.95,
             rule: str = "threshold given") -> TwoSampleResult:
    """The test at ``threshold``, which must have been fixed without reading these scores."""
    ins, out = _scores(inserted, "inserted"), _scores(held_out, "held-out")
    if not math.isfinite(float(threshold)):
        raise ValueError(f"the threshold must be a finite number, got {threshold!r}")
    tp, fp = int(np.sum(ins > threshold)), int(np.sum(out > threshold))
    a = (1.0 - confidence) / 2.0
    return TwoSampleResult(
        epsilon_lb=epsilon_from_counts(tp, ins.size, fp, out.size, delta, confidence),
        ceiling=ceiling(ins.size, out.size, delta, confidence), threshold=float(threshold), tp=tp, n_in=int(ins.size),
        fp=fp, n_out=int(out.size), tpr_low=cp_lower(tp, ins.size, a), fpr_high=cp_upper(fp, out.size, a),
        delta=float(delta), confidence=float(confidence), threshold_rule=rule)


def tuned(inserted, held_out, delta: float, confidence: float = 0.95, seed: int = 0,
          grid: tuple = FPR_GRID) -> TwoSampleResult:
    """The threshold chosen on a seeded half of each class (the held-out half's quantile at the grid's FPR whose
    bound is largest there), the test run on the other half: valid at ``confidence``, on half the canaries."""
    ins, out = _scores(inserted, "inserted"), _scores(held_out, "held-out")
    if ins.size < 4 or out.size < 4:
        raise ValueError("a tuned threshold needs at least 4 inserted and 4 held-out scores")
    rng = np.random.default_rng([int(seed), 7919])
    ti, to = rng.random(ins.size) < 0.5, rng.random(out.size) < 0.5
    if not (ti.any() and (~ti).any() and to.any() and (~to).any()):
        raise ValueError("too few canaries to tune a threshold on one half and test it on the other; give a "
                         "threshold fixed in advance")
    best, t_best = -1.0, float(np.max(out[to])) if to.any() else 0.0
    for f in grid:
        if f * to.sum() < 1:
            continue
        t = float(np.quantile(out[to], 1.0 - f))
        b = epsilon_from_counts(int(np.sum(ins[ti] > t)), int(ti.sum()), int(np.sum(out[to] > t)), int(to.sum()),
                                delta, confidence)
        if b > best:
            best, t_best = b, t
    return bound_at(ins[~ti], out[~to], t_best, delta, confidence,
                    rule=f"threshold tuned on a seeded half (seed {seed}), tested on the other half")


def plan(sample_rate: float, noise_multiplier: float, steps: int, n_in: int, n_out: int, delta: float,
         confidence: float, seed: int = 0, budget: float = PLAN_BUDGET) -> dict | None:
    """Before training: the card's mechanism (Poisson rate q, sigma, T; unit clipping) simulated into pools of
    per-step likelihood-ratio scores per class; for each FPR of the grid (with >= MIN_TAIL held-out pool scores
    above its threshold) the median bound of ``PLAN_DRAWS`` binomial audits of n_in + n_out canaries at the pools'
    tail rates; the best FPR, its threshold and its median bound (the card's limit under this analysis).
    None when the budget leaves too small a pool.
    Over 8 parameters: the mechanism's three numbers, the two class sizes, δ and confidence, then the simulation's seed and budget."""
    q, s, T = float(sample_rate), float(noise_multiplier), int(steps)
    if not (0.0 < q <= 1.0 and s > 0.0 and T >= 1 and n_in >= 1 and n_out >= 1):
        raise ValueError(f"need 0 < q <= 1, sigma > 0, steps >= 1 and canaries of both classes; got {q}, {s}, {T}")
    pool = int(min(budget // (2 * T), MAX_POOL, max(MIN_POOL, POOL_PER_CANARY * max(n_in, n_out))))
    if pool < 10 * MIN_TAIL:
        return None
    rows = _plan_rows(q, s, T, int(n_in), int(n_out), float(delta), float(confidence), int(seed), pool)
    if not rows:
        return None
    best = max(rows, key=lambda r: (r["median_epsilon_lb"], r["fpr"]))
    return {"mechanism": {"type": "subsampled_gaussian", "sample_rate": q, "noise_multiplier": s, "steps": T},
            "n_in": int(n_in), "n_out": int(n_out), "delta": float(delta), "confidence": float(confidence),
            "pool": pool, "seed": int(seed), "fpr": best["fpr"], "threshold": best["threshold"],
            "limit": best["median_epsilon_lb"], "ceiling": ceiling(n_in, n_out, delta, confidence), "grid": rows,
            "statistic": "likelihood_ratio", "assumption": ASSUMPTION}


@lru_cache(maxsize=2)
def _card_pools(q, s, T, seed, pool) -> tuple:
    """The simulated (held-out, inserted) scores of one card: drawn once, shared by every m planned for it."""
    from dpaudit.audit.mechanism_limit import simulated_scores

    return simulated_scores(np.random.default_rng([seed, 2029, T]), q, s, T, pool)


@lru_cache(maxsize=8)
def _plan_rows(q, s, T, n_in, n_out, delta, confidence, seed, pool) -> list:
    """:func:`plan`'s rows from pools of ``pool`` simulated scores per class. Over 8 parameters: plan's numbers
    passed on unchanged; internal."""
    held_out, ins = _card_pools(q, s, T, seed, pool)
    _check(n_in, n_out, delta, confidence)
    a = (1.0 - confidence) / 2.0
    rng = np.random.default_rng([seed, 2030])
    rows = []
    for f in FPR_GRID:
        if f * pool < MIN_TAIL:
            continue
        t = float(np.quantile(held_out, 1.0 - f))
        p1, p0 = float(np.mean(ins > t)), float(np.mean(held_out > t))
        tps, fps = rng.binomial(n_in, p1, PLAN_DRAWS).tolist(), rng.binomial(n_out, p0, PLAN_DRAWS).tolist()
        # each count's Clopper-Pearson bound once (the draws repeat a few dozen counts): epsilon_from_counts' values
        low = {k: cp_lower(k, n_in, a) for k in set(tps)}
        high = {k: cp_upper(k, n_out, a) for k in set(fps)}
        b = np.median([_epsilon(low[i], high[j], delta) for i, j in zip(tps, fps)])
        rows.append({"fpr": f, "threshold": t, "tpr": p1, "median_epsilon_lb": float(b)})
    return rows


def _scores(x, what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"no {what} scores: the test needs canaries of both classes")
    if np.isnan(a).any():
        raise ValueError(f"the {what} scores contain NaN: fix the statistic before auditing")
    return a


def _check(n_in, n_out, delta, confidence):
    if int(n_in) < 1 or int(n_out) < 1:
        raise ValueError("the test needs at least one inserted and one held-out canary")
    if not 0.0 <= float(delta) < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
