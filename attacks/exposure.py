"""Secret-sharer log-perplexities: -log2 P(secret and what follows | shared prefix), summed in bits.

The rank/exposure statistics live in :mod:`dpaudit.audit.exposure` (pure NumPy); this module scores.
As a membership score, ``scores`` returns -log-perplexity (higher = member).
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.attacks.scoring import token_logprobs

NAME = "exposure"


def log_perplexities(model, tokenizer, prefix: str, secrets: list[str], suffix: str,
                     batch_size: int = 64) -> np.ndarray:
    texts = [f"{prefix}{s}{suffix}" for s in secrets]
    lps = token_logprobs(model, tokenizer, texts, score_from_char=[len(prefix)] * len(texts), batch_size=batch_size)
    return np.array([-float(lp.sum()) / math.log(2) for lp in lps])


def scores(model, tokenizer, prefix: str, secrets: list[str], suffix: str, batch_size: int = 64) -> np.ndarray:
    return -log_perplexities(model, tokenizer, prefix, secrets, suffix, batch_size)
