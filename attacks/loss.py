"""LOSS attack (Yeom et al. 2018): score = - mean token NLL of the record (higher = member)."""

from __future__ import annotations

import numpy as np

from dpaudit.attacks.scoring import token_logprobs

NAME = "loss"


def scores(model, tokenizer, texts: list[str], batch_size: int = 64, max_len: int | None = None) -> np.ndarray:
    lps = token_logprobs(model, tokenizer, texts, batch_size=batch_size, max_len=max_len)
    return np.array([float(lp.mean()) for lp in lps])
