"""Anytime-valid tests of the mechanism while training runs: e-processes (test supermartingales) for the probe's
online checks (dpaudit/probe/online.py, docs/probe.md "Fail fast").

An e-process E_t is a product of per-step factors e_t >= 0 with E[e_t | past] <= 1 under the null (the card's
mechanism), so by Ville's inequality P(sup_t E_t >= 1 / alpha) <= alpha: the false-alarm rate holds however
often, and whenever, the running value is looked at, and at the end of the run too. A mixture (average) of
e-processes is one; each monitor here averages a few fixed alternatives so that a large and a small departure are
both found quickly. Everything is on the log scale.

Each product of the noise and mean-shift monitors is started at every step and mixed (:class:`ChangePoints`), so a
departure that begins late is found as fast as one that begins at the start (up to a factor about s^2).

* :class:`NoiseScale`   each step's noise on n coordinates, X = ||noise||^2 / (sigma C)^2 ~ chi2(n) under the card
                        (more noise only makes X larger). Alternatives: the noise at rho sigma, rho < 1; factor
                        rho^-n exp(-(X / 2)(rho^-2 - 1)), the chi2 scale family's likelihood ratio, which has mean
                        1 at sigma and less above it.
* :class:`BatchSizes`   the records of each logical batch, b ~ Binomial(N, q) under Poisson sampling at the card's
                        q. Mean shifts: exponential tilts exp(lambda b) / E[exp(lambda b)], exact for the binomial.
                        Too little spread (fixed-size batches accounted as Poisson): the alternative "this batch has
                        the size of the previous one" (a predictable choice), mixed 9:1 with the null so that a
                        batch of another size (an epoch's short last batch) costs a factor 0.1, not the whole test.

Pure NumPy/SciPy (an audit module: no torch).
"""

from __future__ import annotations

import math

import numpy as np

RHOS = np.array([0.5, 0.7, 0.8, 0.9, 0.95, 0.98])  # noise alternatives, as fractions of the card's sigma
TILTS = np.array([-0.4, -0.2, -0.1, -0.05, 0.05, 0.1, 0.2, 0.4])  # mean-shift tilts, in units of 1 / sd(b)
REPEAT_WEIGHT = 0.9


def _log_mean_exp(x: np.ndarray) -> float:
    return float(_log_mean_exp_rows(np.asarray(x, float)[None, :])[0])


def _log_mean_exp_rows(x: np.ndarray) -> np.ndarray:
    """log of the mean of exp over each row (plain NumPy: this runs at every training step)."""
    m = np.max(x, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return (m + np.log(np.mean(np.exp(x - m), axis=1, keepdims=True)))[:, 0]


def _log_binom_pmf(b: int, N: int, q: float) -> float:
    if not 0 <= b <= N:
        return -np.inf
    return (math.lgamma(N + 1) - math.lgamma(b + 1) - math.lgamma(N - b + 1) + b * math.log(q)
            + (N - b) * math.log1p(-q))


class ChangePoints:
    """Products of per-step factors started at every step s, mixed with weights w_s = 1 / (s (s + 1)) fixed in
    advance (they sum to 1): E_t = sum_{s <= t} w_s prod_{u=s..t} e_u + sum_{s > t} w_s, where the starts still to
    come count 1 each (their sum is 1 / (t + 1)). E_t is a test supermartingale whenever each e_u is a valid factor
    (E[E_t | past] <= E_{t-1}: w_t + 1 / (t + 1) = 1 / t), so Ville's inequality holds for it as for one product.
    A product started at step 1 is buried by evidence *for* the card that came before a change (early steps with
    more noise than the card, then a schedule that lowers it: issue wave 5 · 3/5); the product started where the
    change is is not. The price: a departure from step s on needs about log(s (s + 1)) more evidence (log 2 for one
    that runs from the start). One array of log values per alternative; O(1) per step."""

    def __init__(self, shape):
        self.log_started = np.full(shape, -np.inf)  # log of sum_{s <= t} w_s prod_{u=s..t} e_u
        self.t = 0

    def update(self, log_factor: np.ndarray) -> None:
        self.t += 1
        w = -math.log(self.t * (self.t + 1.0))
        self.log_started = np.logaddexp(self.log_started, w) + log_factor

    def log_values(self) -> np.ndarray:
        return np.logaddexp(self.log_started, -math.log(self.t + 1.0))


class NoiseScale:
    """One e-process per group (group 0: every tensor together; groups 1..P: one tensor each, when given): the
    alternatives rho mixed equally, each started at every step (:class:`ChangePoints`)."""

    def __init__(self, groups: int = 1):
        self.starts = ChangePoints((groups, RHOS.size))

    def update(self, chi2: np.ndarray, n: np.ndarray) -> None:
        """``chi2[g]`` = ||noise_g||^2 / (sigma C)^2 of this step on ``n[g]`` coordinates."""
        chi2, n = np.asarray(chi2, float)[:, None], np.asarray(n, float)[:, None]
        with np.errstate(invalid="ignore"):
            factor = -n * np.log(RHOS)[None, :] - 0.5 * chi2 * (RHOS[None, :] ** -2 - 1.0)
        # a step whose update is NaN (a diverged run; the probe saves no record of it) is no evidence about the
        # noise's scale: its factor is 1, which keeps every e-process a supermartingale
        self.starts.update(np.where(np.isnan(chi2), 0.0, factor))

    def log_e(self) -> np.ndarray:
        """log E of each group (the mixture over the alternatives and the start steps)."""
        return _log_mean_exp_rows(self.starts.log_values())


class BatchSizes:
    """The batch sizes' e-process under Binomial(N, q): mean-shift tilts and repeated sizes, mixed equally."""

    def __init__(self, N: int, q: float):
        self.N, self.q = int(N), float(q)
        sd = max(np.sqrt(N * q * (1 - q)), 1e-9)
        self.lam = TILTS / sd
        self.tilts = ChangePoints(TILTS.size)  # a rate that changes during training: started at every step
        self.log_repeat = 0.0
        self.previous: int | None = None

    def update(self, b: int) -> None:
        N, q = self.N, self.q
        if q >= 1:
            return
        self.tilts.update(self.lam * b - N * np.log1p(q * np.expm1(self.lam)))
        if self.previous is not None:
            if b == self.previous:  # log(0.9 / pmf(b) + 0.1), without overflow for a very unlikely b
                x = math.log(REPEAT_WEIGHT) - _log_binom_pmf(int(b), N, q)
                self.log_repeat += float(np.logaddexp(x, math.log(1 - REPEAT_WEIGHT)))
            else:
                self.log_repeat += math.log(1 - REPEAT_WEIGHT)
        self.previous = int(b)

    @property
    def log_tilt(self) -> np.ndarray:
        """log E of each mean-shift tilt (mixed over its start steps)."""
        return self.tilts.log_values()

    def log_e(self) -> float:
        return _log_mean_exp(np.r_[self.log_tilt, self.log_repeat])

    def log_e_repeat(self) -> float:
        return self.log_repeat


def batch_sizes_log_e(b: np.ndarray, N: int, q: float) -> tuple[float, float]:
    """(log E of the whole batch-size e-process, log E of its repeated-size part alone) at the end of ``b``,
    and the largest value either reached (an e-process may be read at any time: its running maximum is the test)."""
    e = BatchSizes(N, q)
    best, best_repeat = 0.0, 0.0
    for x in np.asarray(b, dtype=np.int64):
        e.update(int(x))
        best, best_repeat = max(best, e.log_e()), max(best_repeat, e.log_e_repeat())
    return best, best_repeat
