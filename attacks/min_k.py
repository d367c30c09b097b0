"""Min-K% prob (Shi et al. 2024): mean log-probability of the k% least likely tokens (higher = member)."""

from __future__ import annotations

import math

import numpy as np

NAME = "min_k"
NEEDS_MOMENTS = False
DEFAULT_K = 0.2


def lowest_mean(values, k: float) -> float:
    n = max(1, int(math.ceil(k * values.numel())))
    return float(values.sort().values[:n].mean())


def from_features(feats, texts=None, k: float = DEFAULT_K, **_) -> np.ndarray:
    return np.array([lowest_mean(f.logp, k) for f in feats])
