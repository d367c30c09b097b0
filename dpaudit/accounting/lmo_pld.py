"""A *lower* bound on the true epsilon of LMO-DP's mechanism, from the privacy-loss distribution of one pair of
neighbouring inputs (so it can refute a claim: the true epsilon is a sup over all pairs).

With per-coordinate draws the noisy clipped sum is a product of i.i.d. coordinates of density f (the Laplace
mixture, :mod:`.lmo_noise`). The pair tested: one record whose clipped gradient spreads C evenly over m
coordinates (m = 1: the Dirac direction the paper's scalar analysis covers; larger m: towards the dense
direction), every other coordinate identical in both worlds. For that pair:

* the base privacy loss L = sum of m one-coordinate losses log f(x - s) - log f(x), s = C / sqrt(m); its
  distribution under "with the record" (P) and "without" (Q) is computed on cells of x whose probabilities are
  exact (the CDF of f is M_Y(x) / 2 for x <= 0), each cell at its *smallest* loss, rounded *down* to a grid, and
  composed m times (FFT convolution of non-negative masses): a loss stochastically below the true one;
* Poisson subsampling, removal direction: the output is (1-q) Q + q P against Q, loss log(1 - q + q e^L);
* T steps composed and converted to epsilon(delta) by dp_accounting's PLD with ``pessimistic_estimate=False``.

Every approximation lowers the loss, so delta(eps) and hence epsilon(delta) are under-estimated: a lower bound
of the true epsilon. Mass outside the x range is dropped (it too lowers delta). A shared per-step Y is not
covered (the pair's coordinates are then dependent).
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.accounting.lmo_noise import LmoNoise

BASE_GRID = 2e-5  # loss grid of the one-coordinate and m-coordinate losses
STEP_GRID = 1e-4  # loss grid of the subsampled step handed to dp_accounting
CELLS = 20000  # cells of x over the bulk (20 mean absolute noises either side); geometric cells beyond


def _log_cdf(noise: LmoNoise, x: np.ndarray) -> np.ndarray:
    """log F(x) for the symmetric density f: F(x) = M_Y(x) / 2 for x <= 0, 1 - M_Y(-x) / 2 above."""
    lm = np.array([noise.log_mgf(-abs(float(v))) for v in x])
    return np.where(x <= 0, math.log(0.5) + lm, np.log1p(-0.5 * np.exp(lm)))


def _x_range(noise: LmoNoise, s: float, tail: float = 1e-13) -> float:
    """An X with P(|Z| > X) = M_Y(-X) <= tail."""
    X = max(1.0, 10 * s)
    while noise.log_mgf(-X) > math.log(tail):
        X *= 2
        if X > 1e9:
            break
    return X + s


def coordinate_loss_pmfs(noise: LmoNoise, s: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(masses under P, masses under Q, index of the first grid point) of one coordinate's loss at shift s, each
    cell's smallest loss rounded down to BASE_GRID. P: the coordinate carries the shift; Q: it does not."""
    X = _x_range(noise, s)
    R = min(X, 20 / max(noise.mean(), 1e-12) + s)
    outer = np.geomspace(R, max(X, R * (1 + 1e-9)), CELLS // 10)
    x = np.unique(np.r_[-outer, np.linspace(-R, R, CELLS), outer, 0.0, s])
    logf = noise.log_density(x)
    logf_s = noise.log_density(x - s)
    loss = logf_s - logf
    cell_loss = np.minimum(loss[:-1], loss[1:])
    cdf_q = np.exp(_log_cdf(noise, x))
    cdf_p = np.exp(_log_cdf(noise, x - s))
    mass_q = np.clip(np.diff(cdf_q), 0, None)
    mass_p = np.clip(np.diff(cdf_p), 0, None)
    idx = np.floor(cell_loss / BASE_GRID).astype(np.int64)
    lo = int(idx.min())
    n = int(idx.max()) - lo + 1
    p = np.bincount(idx - lo, weights=mass_p, minlength=n)
    q = np.bincount(idx - lo, weights=mass_q, minlength=n)
    return p, q, lo


def _compose(pmf: np.ndarray, lo: int, m: int) -> tuple[np.ndarray, int]:
    """m-fold convolution (binary powering, FFT), negatives from rounding clipped to 0."""
    from scipy.signal import fftconvolve

    out: np.ndarray | None = None
    out_lo = 0
    base, base_lo = pmf, lo
    while m:
        if m & 1:
            if out is None:
                out, out_lo = base.copy(), base_lo
            else:
                out, out_lo = np.clip(fftconvolve(out, base), 0, None), out_lo + base_lo
        m >>= 1
        if m:
            base, base_lo = np.clip(fftconvolve(base, base), 0, None), 2 * base_lo
    assert out is not None, "m >= 1 convolutions"
    return out, out_lo


def step_loss_pmf(noise: LmoNoise, C: float, m: int, q: float) -> dict[int, float]:
    """{grid index: mass} of one Poisson-subsampled step's loss (removal direction), rounded down to STEP_GRID."""
    p1, q1, lo = coordinate_loss_pmfs(noise, C / math.sqrt(m))
    p, plo = _compose(p1, lo, m)
    qq, qlo = _compose(q1, lo, m)
    assert plo == qlo
    L = (np.arange(p.size) + plo) * BASE_GRID
    mix = q * p + (1 - q) * qq
    step = np.log1p(q * np.expm1(L)) if q < 1 else L
    idx = np.floor(step / STEP_GRID).astype(np.int64)
    keep = mix > 0
    out: dict[int, float] = {}
    for i, w in zip(idx[keep], mix[keep]):
        out[int(i)] = out.get(int(i), 0.0) + float(w)
    return out


MAX_COMPOSED_CELLS = 5 * 10 ** 6  # the composed loss grid's estimated width; beyond it (a long run of large per-step
# losses: 10^5 steps at C x E[Y] = 10 took 19 GB and minutes; 10^8 steps at the committed card ran for hours) the lower
# value is not computed (10^6 steps of the committed card, 3.5e6 cells: 35 s)


def composed_cells(step: dict[int, float], steps: int) -> float:
    """The width, in STEP_GRID cells, of ``steps`` self-compositions of the step's loss (its mean times the steps
    plus 20 standard deviations either side): what dp_accounting's self_compose holds in memory."""
    idx = np.fromiter(step.keys(), dtype=float, count=len(step))
    w = np.fromiter(step.values(), dtype=float, count=len(step))
    w = w / w.sum()
    mean = float(idx @ w)
    sd = math.sqrt(max(float(((idx - mean) ** 2) @ w), 0.0))
    return abs(mean) * steps + 40 * sd * math.sqrt(steps) + (idx.max() - idx.min())


def epsilon_lower(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float,
                  m: int = 1) -> float | None:
    """A lower bound on the true epsilon at ``delta`` (the pair spreading C over m coordinates); None where its
    composed grid would exceed MAX_COMPOSED_CELLS (no lower value rather than hours and tens of GB)."""
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

    step = step_loss_pmf(noise, C, m, sample_rate)
    if composed_cells(step, steps) > MAX_COMPOSED_CELLS:
        return None
    pmf = pld_pmf.create_pmf(step, STEP_GRID, 0.0, pessimistic_estimate=False)
    pld = PrivacyLossDistribution(pmf).self_compose(steps)
    return max(0.0, float(pld.get_epsilon_for_delta(delta)))


def best_lower(noise: LmoNoise, C: float, sample_rate: float, steps: int, delta: float,
               ms=(1, 4, 16)) -> tuple[float | None, int]:
    """(the largest lower bound over the directions tried, its m); (None, 0) where none could be computed."""
    vals = [(v, m) for m in ms if (v := epsilon_lower(noise, C, sample_rate, steps, delta, m)) is not None]
    return max(vals) if vals else (None, 0)
