"""Scores of white-box gradient canaries from every update, not only their sum (docs/architecture.md, "Two
independent sources of truth").

A gradient canary i is C times a unit direction u_i added to the clipped sum with the records' Poisson rate q;
the auditor sees each noisy update, and its projection x_t = <g_t, u_i> B / C is, per step,

    inserted:  q N(1, sigma^2) + (1 - q) N(0, sigma^2)        held out:  N(0, sigma^2)

(plus the records' own gradients along u_i, the same for both). The sum of x_t (today's score) separates the
two by about q sqrt(T) / sigma. The Neyman-Pearson statistic for this pair is the log-likelihood ratio
summed over steps,

    LLR_i = sum_t log(1 - q + q exp((2 x_t - 1) / (2 sigma^2))),

the statistic the accountant's worst case is about: it weighs a large x_t (a step where the canary was
probably sampled) far more than a small one. Computed in log space (logaddexp), float64.

Which statistic a report uses is fixed by what the record and the card hold, never by the scores:
:func:`choose` returns the LLR when the per-step projections are there (or the probe accumulated it online at
exactly the card's sigma and steps) and the card's mechanism is one
subsampled Gaussian over exactly those steps with sigma > 0; otherwise the sum.

Pure NumPy.
"""

from __future__ import annotations

import numpy as np

from dpaudit.audit.mechanism import Audited

STATISTICS = ("sum", "likelihood_ratio")


def subsampled_gaussian_llr(steps, sample_rate: float, noise_multiplier: float) -> np.ndarray:
    """Per canary, the summed per-step log-likelihood ratio (inserted vs held out); ``steps`` is (T, m)."""
    x = np.asarray(steps, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"per-step projections must be (steps, canaries), got shape {x.shape}")
    q, s = float(sample_rate), float(noise_multiplier)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sample rate must be in (0, 1], got {q}")
    if not s > 0.0:
        raise ValueError(f"the likelihood ratio needs noise (sigma > 0), got {s}")
    a = (2.0 * x - 1.0) / (2.0 * s * s)
    per_step = np.logaddexp(np.log1p(-q), np.log(q) + a) if q < 1.0 else a
    return per_step.sum(axis=0)


def choose(record: dict, audited: Audited) -> tuple[str, dict]:
    """(statistic, its parameters) for one white-box canary record, from the record and the card's mechanism
    only (``audited``, built by the load step from the card's typed events). The likelihood ratio needs the
    per-step projections (``record['steps_array']``, (T, m)) and one subsampled Gaussian with T steps and
    sigma > 0."""
    steps, online = record.get("steps_array"), record.get("online")
    if steps is None and online is None:
        return "sum", {"why": "the record has no per-step projections"}
    g = audited.gaussian
    if g is None:
        return "sum", {"why": audited.why}
    if steps is None:  # accumulated online by the probe (O(m)): usable only at exactly the card's mechanism
        assert online is not None
        if int(online["steps"]) != g.steps:
            return "sum", {"why": f"the card's Gaussian event has {g.steps} steps, the record {online['steps']}"}
        if not np.isclose(float(online["noise_multiplier"]), g.noise_multiplier, rtol=1e-9, atol=0):
            return "sum", {"why": f"the probe accumulated the likelihood ratio at sigma {online['noise_multiplier']:.6g}, "
                                  f"the card says {g.noise_multiplier:.6g}"}
        return "likelihood_ratio", {"sample_rate": float(online["sample_rate"]), "noise_multiplier": g.noise_multiplier,
                                    "steps": g.steps, "online": True}
    if g.steps != int(np.asarray(steps).shape[0]):
        return "sum", {"why": f"the card's Gaussian event has {g.steps} steps, the record {np.asarray(steps).shape[0]}"}
    q = float(record.get("sample_rate", g.sample_rate))
    return "likelihood_ratio", {"sample_rate": q, "noise_multiplier": g.noise_multiplier, "steps": g.steps}


def scores(record: dict, audited: Audited) -> tuple[np.ndarray, str, dict]:
    """(scores, statistic, parameters): the chosen statistic of every canary of one record."""
    stat, params = choose(record, audited)
    if stat == "likelihood_ratio" and params.get("online"):
        return np.asarray(record["online"]["llr"], dtype=float), stat, params
    if stat == "likelihood_ratio":
        return subsampled_gaussian_llr(record["steps_array"], params["sample_rate"], params["noise_multiplier"]), \
            stat, params
    return np.asarray(record["scores"], dtype=float), stat, params
