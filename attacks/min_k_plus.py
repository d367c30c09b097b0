"""Min-K%++ (Zhang et al. 2025): per token, (log p(x_t) - mu_t) / sigma_t with mu_t, sigma_t the mean
and sd of log p(z) under the model's own next-token distribution; then the mean of the k% lowest
(higher = member)."""

from __future__ import annotations

import numpy as np

from dpaudit.attacks.min_k import DEFAULT_K, lowest_mean

NAME = "min_k_plus"
NEEDS_MOMENTS = True


def from_features(feats, texts=None, k: float = DEFAULT_K, **_) -> np.ndarray:
    return np.array([lowest_mean((f.logp - f.mu) / f.sigma, k) for f in feats])
