"""Reference-model calibration (Carlini et al. 2021; Mireshghallah et al. 2022): the target's mean
token log-probability minus the reference model's (the pretrained base is the natural reference).
Higher = member: fine-tuning raised the record's likelihood more than the base explains."""

from __future__ import annotations

import numpy as np

NAME = "reference"
NEEDS_MOMENTS = False


def from_features(feats, texts=None, reference_feats=None, **_) -> np.ndarray:
    if reference_feats is None:
        raise ValueError("the reference attack needs the reference model's features")
    return np.array([float(f.logp.mean() - r.logp.mean()) for f, r in zip(feats, reference_feats)])
