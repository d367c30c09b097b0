"""Probe readings of a simulated DP-SGD run whose truth is known, honest or with one planted bug: what the mechanism
checks' false-alarm rates and power are measured on (tests/audit/test_mechanism_checks.py,
experiments/mechanism_check_false_alarms.py).

The run: T steps of Poisson sampling at rate q from N records (or fixed-size batches), Gaussian noise sigma in
units of the clipping norm C = 1, the update divided by the expected batch q N (or, as the bug, by the actual
batch); M held-out Dirac canaries read every step, K clip canaries of norm ``clip_out`` C sampled at q.

Pure NumPy (an audit module: no torch).
"""

from __future__ import annotations

import numpy as np

from dpaudit.audit.mechanism_checks import CardView, Readings

N, Q, SIGMA, T, M_OUT, K = 1000, 0.1, 0.9, 60, 200, 16
CARD = CardView(sample_rate=Q, noise_multiplier=SIGMA, steps=T, clipping_norm=1.0, dataset_size=N,
                expected_batch_size=N * Q)


def readings(seed: int, *, sigma_true: float = SIGMA, q_true: float = Q, fixed: bool = False,
             divide_by_actual: bool = False, clip_out: float = 1.0, steps: int = T,
             coordinates: str = "block") -> Readings:
    """One run's readings (seeded). The defaults are the honest run of :data:`CARD`; each keyword plants one bug:
    less noise, another rate, fixed-size batches, the actual batch as divisor, clipping at ``clip_out`` C."""
    rng = np.random.default_rng(seed)
    b = np.full(steps, int(N * Q)) if fixed else rng.binomial(N, q_true, size=steps)
    scale = (N * Q / np.maximum(b, 1)) if divide_by_actual else np.ones(steps)  # units of C / B
    held = rng.normal(0, sigma_true, size=(steps, M_OUT)) * scale[:, None]
    sampled = rng.random((steps, K)) < Q
    clip = (sampled * clip_out + rng.normal(0, sigma_true, size=(steps, K))) * scale[:, None]
    probe = {"coordinates": coordinates, "sample_rate": Q, "clipping_norm": 1.0, "steps": steps, "divisor": N * Q,
             "clip_multiple": 4.0, "clip_entry": "before clipping (per-sample rows)", "sum_tolerance": 1e-4}
    return Readings(probe=probe, records=b.astype(np.int64), sum_ratio=rng.uniform(0.1, 0.9, steps),
                    clip_projections=clip.astype(np.float32), clip_sampled=sampled,
                    heldout_ss=np.sum(held * held, axis=1), heldout_m=M_OUT)
