"""Secret-sharer exposure (Carlini et al. 2019) from log-perplexities. Pure NumPy/SciPy.

Inputs are log-perplexities in bits (-log2 P(secret and what follows | prefix), summed, not averaged)
of each canary and of reference candidates drawn uniformly from the randomness space R without the
canaries' own secrets.

* rank exposure: log2(N_ref + 1) - log2(rank), rank = 1 + #{refs with px < px(canary)} (ties count
  half). This is the sampled estimate of log2|R| - log2 rank_R, capped at log2(N_ref + 1).
* extrapolated exposure: -log2 SkewNormCDF(px(canary)) with the skew-normal fitted to the reference
  log-perplexities; it can exceed the sampled cap and is an estimate, not a bound.

Under the null (canary not inserted and candidates exchangeable), P[exposure >= x] = 2^-x, so exposure
is a calibrated statistic; :func:`epsilon_from_exposures` turns it into an (eps, delta) lower bound.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import skewnorm


def rank_exposure(canary_px, reference_px) -> np.ndarray:
    ref = np.sort(np.asarray(reference_px, dtype=float))
    c = np.asarray(canary_px, dtype=float)
    if ref.size == 0:
        raise ValueError("exposure needs at least one reference candidate")
    below = np.searchsorted(ref, c, side="left")
    ties = np.searchsorted(ref, c, side="right") - below
    rank = 1.0 + below + 0.5 * ties
    return np.log2(ref.size + 1) - np.log2(rank)


def extrapolated_exposure(canary_px, reference_px, space_size: int | None = None) -> np.ndarray:
    ref = np.asarray(reference_px, dtype=float)
    if ref.size < 10:
        raise ValueError("skew-normal extrapolation needs at least 10 reference candidates")
    a, loc, scale = skewnorm.fit(ref)
    cdf = skewnorm.cdf(np.asarray(canary_px, dtype=float), a, loc, scale)
    floor = 1.0 / space_size if space_size else 1e-300
    out = -np.log2(np.clip(cdf, floor, 1.0))
    return out


def epsilon_from_exposures(exposures, threshold: float, delta: float, confidence: float = 0.95,
                           group_size: int = 1) -> float:
    """Lower bound on eps from inserted canaries' exposures at a threshold fixed in advance.

    Under (eps, delta)-DP, P_in[exposure >= x] <= e^eps 2^-x + delta. With k of n inserted canaries at
    or above x, the Clopper-Pearson lower bound p_lo on that probability gives
    eps >= ln((p_lo - delta) / 2^-x); divided by the number of insertions (group privacy).
    """
    e = np.asarray(exposures, dtype=float)
    n = e.size
    k = int(np.sum(e >= threshold))
    if n == 0 or k == 0:
        return 0.0
    p_lo = float(beta_dist.ppf(1 - confidence, k, n - k + 1))
    if p_lo - delta <= 0:
        return 0.0
    return max(0.0, math.log((p_lo - delta) / 2.0 ** (-threshold)) / group_size)
