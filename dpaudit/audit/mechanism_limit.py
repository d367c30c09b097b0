"""What the best one-run audit can show about the mechanism written on the card, and the white-box guess count
that shows the most (docs/architecture.md, "Two independent sources of truth").

:func:`dpaudit.audit.fdp.ideal_limit` asks what a one-run audit shows about a mu-GDP mechanism with exactly the
claimed epsilon. A Poisson-subsampled Gaussian over few steps is far from Gaussian: at delta = 1e-5 its epsilon
comes from events rarer than any m canaries can sample, so that limit can sit well above what *this* mechanism
lets any audit show. Here the card's own mechanism is simulated instead: m Dirac gradient canaries, half
inserted by a fair coin; per step an inserted one is sampled with rate q and adds 1 (C, in units of C) to its
coordinate, and every coordinate gets N(0, sigma^2); each canary is scored by the per-step likelihood ratio
(:func:`dpaudit.audit.whitebox_lr.subsampled_gaussian_llr`, the Neyman-Pearson statistic of this pair), the same
guesses are made and the same f-DP analysis is run. The median over the simulated audits is the mechanism's
limit ("this audit reaches X% of what any one-run audit of this card's mechanism with these canaries shows").

The same simulation fixes the white-box guess count before any score is read: among a grid of k (k_pos =
k_neg = k), the one whose median simulated bound is largest. It is a function of the card, m, delta and the
confidence only, never of the scores, so the guesses stay fixed in advance (the one-run analysis' condition).

Cost: sims x steps x m normal draws; :data:`BUDGET` caps it (fewer simulated audits for long runs). Where the
budget allows fewer than :data:`MIN_SIMS` whole audits (many canaries over many steps), the canaries' scores are
simulated once into a pool per class (inserted / held out; the canaries of an audit are independent given their
coins, so an audit is m draws from these two laws) and :data:`MAX_SIMS` audits are resampled from it; the pool
must hold at least :data:`POOL_PER_CANARY` x m scores per class. Beyond that (10^4 to 10^6 canaries, the
probe's block; :func:`_tail_counts`) an audit's count is read from the pools' tails: its k highest scores are
those above the mixture's (1 - k/m) quantile, of which a share S1(t) / (S1(t) + S0(t)) is inserted, so the count
is m/2 S1(t) + m/2 F0(t') (the expected count, the median of a sum of many independent guesses up to one), for
the k whose tails hold at least :data:`TAIL_HITS` pool scores. With fewer than :data:`MIN_TAIL_POOL` scores per
class the caller keeps m/4 + m/4 and prints no mechanism limit. Pure NumPy.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dpaudit.audit import fdp
from dpaudit.audit.whitebox_lr import subsampled_gaussian_llr

BUDGET = 6e7  # normal draws per study (a few seconds on one core)
MAX_SIMS, MIN_SIMS = 1000, 100
K_DIVISORS = (4, 6, 8, 10, 14, 20, 30, 40, 60, 100)  # k = m // d guesses on each side
MIN_K = 5
# many canaries: the best audits guess far fewer than m/100 on each side; these divisors join the grid only where
# they leave at least LARGE_MIN_K guesses (m >= 7,500), so smaller audits keep their grid
LARGE_DIVISORS = (150, 200, 300, 500, 1000, 2000, 5000, 10000, 20000)
LARGE_MIN_K = 50
MIN_TAIL_POOL = 20_000  # scores per class for the tail reading
TAIL_HITS = 50  # pool scores (of both classes) a k's tail must hold to be read
POOL_PER_CANARY = 10  # a resampled audit draws m scores from pools at least this many times larger
POOL_CHUNK = 4096  # canaries simulated at a time into the pool


def n_sims(m: int, steps: int, budget: float = BUDGET) -> int:
    """How many audits the budget allows (0 when fewer than MIN_SIMS)."""
    s = int(min(MAX_SIMS, budget // max(1, m * steps)))
    return s if s >= MIN_SIMS else 0


def k_grid(m: int) -> list[int]:
    """Guess counts per side tried for m canaries, largest first (m // 4 always among them)."""
    return sorted({max(1, m // d) for d in K_DIVISORS if m // d >= MIN_K} | {max(1, m // 4)} |
                  {m // d for d in LARGE_DIVISORS if m // d >= LARGE_MIN_K}, reverse=True)


@lru_cache(maxsize=64)
def _correct_counts(m: int, sample_rate: float, noise_multiplier: float, steps: int, sims: int, seed: int,
                    ks: tuple) -> np.ndarray:
    """(sims, len(ks)): correct guesses of each simulated audit at each k (k highest LLRs 'in', k lowest 'out')."""
    rng = np.random.default_rng([seed, 2025, m, steps])
    out = np.empty((sims, len(ks)), dtype=np.int64)
    for s in range(sims):
        signs = rng.random(m) < 0.5
        sampled = (rng.random((steps, m)) < sample_rate) & signs
        x = sampled + noise_multiplier * rng.standard_normal((steps, m))
        ranked = signs[np.argsort(subsampled_gaussian_llr(x, sample_rate, noise_multiplier), kind="stable")]
        top = np.cumsum(ranked[::-1])  # inserted among the j+1 highest
        bottom = np.cumsum(~ranked)  # held out among the j+1 lowest
        out[s] = [top[k - 1] + bottom[k - 1] for k in ks]
    return out


def pool_size(m: int, steps: int, budget: float = BUDGET) -> int:
    """Scores per class the budget allows for resampled audits (0 when below POOL_PER_CANARY x m)."""
    n = int(budget // (2 * max(1, steps)))
    return n if n >= POOL_PER_CANARY * m else 0


@lru_cache(maxsize=16)
def _resampled_counts(m: int, sample_rate: float, noise_multiplier: float, steps: int, pool: int, sims: int,
                      seed: int, ks: tuple) -> np.ndarray:
    """As :func:`_correct_counts`, each audit's m scores drawn from pools of ``pool`` simulated scores per class."""
    rng = np.random.default_rng([seed, 2026, m, steps])
    held_out, ins = simulated_scores(rng, sample_rate, noise_multiplier, steps, pool)
    out = np.empty((sims, len(ks)), dtype=np.int64)
    for s in range(sims):
        signs = rng.random(m) < 0.5
        llr = np.where(signs, ins[rng.integers(0, pool, m)], held_out[rng.integers(0, pool, m)])
        ranked = signs[np.argsort(llr, kind="stable")]
        top, bottom = np.cumsum(ranked[::-1]), np.cumsum(~ranked)
        out[s] = [top[k - 1] + bottom[k - 1] for k in ks]
    return out


def simulated_scores(rng, sample_rate: float, noise_multiplier: float, steps: int, pool: int) -> tuple:
    """(held-out, inserted): ``pool`` simulated per-step likelihood-ratio scores of each class."""
    scores = []
    for inserted in (False, True):
        col = np.empty(pool)
        for a in range(0, pool, POOL_CHUNK):
            n = min(POOL_CHUNK, pool - a)
            x = noise_multiplier * rng.standard_normal((steps, n))
            if inserted:
                x += rng.random((steps, n)) < sample_rate
            col[a:a + n] = subsampled_gaussian_llr(x, sample_rate, noise_multiplier)
        scores.append(col)
    return scores[0], scores[1]


@lru_cache(maxsize=16)
def _tail_counts(m: int, sample_rate: float, noise_multiplier: float, steps: int, pool: int, seed: int,
                 ks: tuple) -> np.ndarray:
    """(1, len(ks)): the count of an audit with m canaries and k + k guesses read from the pools' tails (module
    docstring); -1 where a k's tail holds fewer than TAIL_HITS pool scores."""
    rng = np.random.default_rng([seed, 2027, m, steps])
    held_out, ins = simulated_scores(rng, sample_rate, noise_multiplier, steps, pool)
    both = np.concatenate([held_out, ins])  # the half/half mixture of the two classes
    out = np.full((1, len(ks)), -1, dtype=np.int64)
    for j, k in enumerate(ks):
        if k / m * both.size < TAIL_HITS:
            continue
        top, bottom = np.quantile(both, 1 - k / m), np.quantile(both, k / m)
        out[0, j] = int(m / 2 * np.mean(ins > top) + m / 2 * np.mean(held_out < bottom))
    return out


def study(m: int, sample_rate: float, noise_multiplier: float, steps: int, delta: float, confidence: float,
          seed: int = 0, budget: float = BUDGET, extra_k: int | None = None) -> dict | None:
    """The simulated best audits of a subsampled Gaussian (q, sigma, T) with m canaries at every k of
    :func:`k_grid` (and ``extra_k``, which never changes the draws): per k the median number right and the f-DP
    (eps, delta) bound at that median; the best k of the grid. None when the budget allows fewer than MIN_SIMS
    audits.
    Over 8 parameters: the mechanism's three numbers, m, δ and confidence, then the simulation's seed, budget and one extra k: the numbers `dpaudit audit plan` passes."""
    q, s, T = float(sample_rate), float(noise_multiplier), int(steps)
    if not (0.0 < q <= 1.0 and s > 0.0 and T >= 1 and m >= 2):
        raise ValueError(f"need 0 < q <= 1, sigma > 0, steps >= 1, m >= 2; got {q}, {s}, {T}, {m}")
    sims, pool, method = n_sims(m, T, budget), 0, "audits"
    if sims == 0:
        pool, sims, method = pool_size(m, T, budget), MAX_SIMS, "resampled"
        if pool == 0:
            pool, sims, method = int(budget // (2 * max(1, T))), 0, "tails"
            if pool < MIN_TAIL_POOL:
                return None
    grid = k_grid(m)
    ks = tuple(sorted(set(grid) | ({int(extra_k)} if extra_k and 0 < extra_k <= m // 2 else set()), reverse=True))
    counts = (_tail_counts(int(m), q, s, T, pool, int(seed), ks) if method == "tails" else
              _resampled_counts(int(m), q, s, T, pool, sims, int(seed), ks) if pool
              else _correct_counts(int(m), q, s, T, sims, int(seed), ks))
    med = np.median(counts, axis=0).astype(int)  # bounds are monotone in the count: the median audit's bound
    bounds = [fdp.approx_dp_epsilon_lower_bound(int(m), 2 * k, int(v), float(delta), float(confidence))
              if v >= 0 else -1.0 for k, v in zip(ks, med)]
    on_grid = [b if k in grid else -1.0 for k, b in zip(ks, bounds)]
    i = int(np.argmax(on_grid))  # first maximum: the largest k among ties
    return {"mechanism": {"type": "subsampled_gaussian", "sample_rate": q, "noise_multiplier": s, "steps": T},
            "m": int(m), "delta": float(delta), "confidence": float(confidence), "simulations": sims,
            "pool": pool, "method": method, "seed": int(seed), "k": list(ks), "median_right": [int(v) for v in med],
            "epsilon_lb": [float(b) for b in bounds], "best_k": int(ks[i])}


def best_k(m: int, params: dict, delta: float, confidence: float) -> int | None:
    """The white-box guesses per side for a likelihood-ratio canary record (``params``: sample_rate,
    noise_multiplier, steps, as :func:`dpaudit.audit.whitebox_lr.choose` gives them); None when not simulated."""
    st = study(m, params["sample_rate"], params["noise_multiplier"], params["steps"], delta, confidence)
    return None if st is None else st["best_k"]


def limit(m: int, k: int, params: dict, delta: float, confidence: float) -> dict | None:
    """The best one-run audit of the card's mechanism with m canaries and k + k guesses: the median simulated
    count and its f-DP bound (None when not simulated or k > m / 2)."""
    st = study(m, params["sample_rate"], params["noise_multiplier"], params["steps"], delta, confidence, extra_k=k)
    if st is None or k not in st["k"] or st["median_right"][st["k"].index(k)] < 0:
        return None
    j = st["k"].index(k)
    return {"mechanism": st["mechanism"], "m": st["m"], "k_pos": k, "k_neg": k, "median_right": st["median_right"][j],
            "epsilon_lb": st["epsilon_lb"][j], "simulations": st["simulations"], "pool": st["pool"],
            "method": st["method"], "statistic": "likelihood_ratio"}
