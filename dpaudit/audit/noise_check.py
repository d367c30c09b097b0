"""How much noise the recorded updates carry, read from the white-box canaries' per-step projections (docs/
architecture.md, "Two independent sources of truth").

With Dirac or sparse gradient canaries (distinct coordinates, so the directions u_i are orthonormal), the
projection of update t on canary i, in units of C / B, is

    x_ti = d_ti + n_ti,    n_ti ~ N(0, sigma_true^2) independent over (t, i),

where d_ti (the records' clipped gradients along u_i, the canary itself when sampled) is fixed before step t's
noise is drawn. Given the past, each step's sum over i of x_ti^2 is sigma_true^2 times a non-central
chi-square, which is stochastically larger than the central one; step by step, the sum S of all N = T m
squares dominates sigma_true^2 chi^2_N. So

    sigma_true <= sqrt(S / chi2.ppf(1 - confidence, N))

holds with the stated confidence whatever the records' gradients were, and an upper bound below the card's
sigma shows that the updates carry less noise than the card (and so its epsilon) says. The converse does
not hold: the records' own gradients only add spread, so an upper bound above sigma proves nothing about
the noise; the ratio ``rms / sigma`` says how much the inserted canaries and the records' gradients
spread the projections (the records' part is what the simulated limits, :mod:`dpaudit.audit.mechanism_limit`,
leave out). The labels S_i are never used.

Dense canaries are orthogonal only up to uneven buckets, so their projections' noise is not independent:
not checked. Pure NumPy/SciPy.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2

KINDS = ("dirac", "sparse")  # orthonormal canary directions


def check(steps, noise_multiplier: float, confidence: float = 0.95) -> dict:
    """The noise check of one (T, m) array of per-step projections against the card's ``noise_multiplier``."""
    return from_sums(summarise(steps), noise_multiplier, confidence)


def summarise(steps) -> dict:
    """What the check needs of the projections: their number, shape and sum of squares."""
    x = np.asarray(steps, dtype=np.float64)
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"per-step projections must be a non-empty (steps, canaries) array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("per-step projections must be finite")
    return {"values": int(x.size), "steps": int(x.shape[0]), "m": int(x.shape[1]), "sum_of_squares": float(np.sum(x * x))}


def from_sums(s: dict, noise_multiplier: float, confidence: float = 0.95) -> dict:
    """The check from :func:`summarise`'s numbers: the upper confidence bound on the noise actually added
    (in units of the card's sigma, i.e. of C / B), the projections' root mean square, and the status."""
    sigma = float(noise_multiplier)
    if not sigma > 0:
        raise ValueError(f"the noise check needs the card's sigma > 0, got {sigma}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n, ss = int(s["values"]), float(s["sum_of_squares"])
    upper = float(np.sqrt(ss / chi2.ppf(1.0 - confidence, n)))
    rms = float(np.sqrt(ss / n))
    return {"values": n, "steps": int(s["steps"]), "m": int(s["m"]), "noise_multiplier": sigma, "rms": rms,
            "ratio": rms / sigma, "upper": upper, "confidence": float(confidence),
            "status": "below the card" if upper < sigma else "no shortfall"}


def applies(record: dict, statistic: str) -> bool:
    """Whether one white-box canary record can be checked: orthonormal canaries with per-step projections, and
    the per-step likelihood ratio chosen (one subsampled Gaussian over exactly these steps, sigma > 0)."""
    return statistic == "likelihood_ratio" and record.get("kind") in KINDS and record.get("steps_array") is not None
