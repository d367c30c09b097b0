"""zlib ratio (Carlini et al. 2021): total NLL (bits) over the zlib-compressed length (bits) of the
text; members have low NLL relative to their compressibility. Score = -ratio (higher = member)."""

from __future__ import annotations

import math
import zlib

import numpy as np

NAME = "zlib"
NEEDS_MOMENTS = False


def from_features(feats, texts, **_) -> np.ndarray:
    out = []
    for f, t in zip(feats, texts):
        nll_bits = -float(f.logp.sum()) / math.log(2)
        z_bits = 8 * len(zlib.compress(t.encode("utf-8")))
        out.append(-nll_bits / z_bits)
    return np.array(out)
