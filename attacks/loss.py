"""LOSS attack (Yeom et al. 2018): score = - mean token NLL of the record (higher = member)."""

from __future__ import annotations

import numpy as np

NAME = "loss"
NEEDS_MOMENTS = False


def from_features(feats, texts=None, **_) -> np.ndarray:
    return np.array([float(f.logp.mean()) for f in feats])
