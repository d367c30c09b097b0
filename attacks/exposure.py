"""Secret-sharer log-perplexities: -log2 P(secret and what follows | shared prefix), summed, in bits.

The canary prefix is the same for every candidate secret, so it is run through the model once and
its key/value cache is reused for every batch of candidates: only the secret and suffix tokens are
computed per candidate (where the cache serves: attacks/prefix_cache.py; else each whole sequence). That is what makes exact enumeration of a 10^6 randomness space feasible.
Rank/exposure statistics live in :mod:`dpaudit.audit.exposure` (pure NumPy); this module scores.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections import defaultdict

import numpy as np
import torch

from dpaudit.attacks import prefix_cache
from dpaudit.attacks.scoring import encode, owns
from dpaudit.tokens import model_device, pad_id

NAME = "exposure"


@torch.inference_mode()
def log_perplexities(model, tokenizer, prefix: str, secrets: list[str], suffix: str, batch_size: int = 256,
                     progress=None, framing: str = "bos_eos", shard: tuple[int, int] | None = None) -> np.ndarray:
    """Bits of -log2 P(secret + suffix + EOS | BOS + prefix) for each candidate secret (``framing``: see
    :func:`dpaudit.attacks.scoring.encode`). ``shard = (i, n)``: only chunks c with c mod n = i (NaN elsewhere).
    Over 8 parameters: the template's three parts, the candidates and four keyword options, as exposure_trie.log_probs takes them."""
    model.eval()
    device = model_device(model)
    texts = [f"{prefix}{s}{suffix}" for s in secrets]
    out = np.full(len(texts), np.nan)
    chunk_no = -1
    # tokenise in chunks; group candidates by their unscored (shared) token prefix, normally one group
    groups: dict[tuple, list[tuple[int, list[int]]]] = defaultdict(list)
    for start in range(0, len(texts), 4096):
        seqs, masks = encode(tokenizer, texts[start:start + 4096], [len(prefix)] * min(4096, len(texts) - start), None,
                             framing)
        for j, (s, m) in enumerate(zip(seqs, masks)):
            first = m.index(True)
            groups[tuple(s[:first])].append((start + j, s[first:]))
    for shared, members in groups.items():
        P = len(shared)
        cached, pre = prefix_cache.serves(model, list(shared), device)
        cache0 = pre.past_key_values if cached else None
        first_logp = torch.log_softmax(pre.logits[0, -1].float(), -1)
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            chunk_no += 1
            if not owns(shard, chunk_no):
                continue
            if not cached:  # a model whose cache cannot be reused (Mamba): each candidate's whole sequence
                total = prefix_cache.full_log_probs(model, list(shared), [r for _, r in chunk], pad_id(tokenizer),
                                                    device, batch_size)
                for j, (i, _) in enumerate(chunk):
                    out[i] = -float(total[j]) / math.log(2)
                if progress is not None:
                    progress(len(chunk))
                continue
            S = max(len(r) for _, r in chunk)
            ids = torch.full((len(chunk), S), pad_id(tokenizer), dtype=torch.long)
            valid = torch.zeros((len(chunk), S), dtype=torch.bool)
            for j, (_, r) in enumerate(chunk):
                ids[j, : len(r)] = torch.tensor(r)
                valid[j, : len(r)] = True
            ids, valid = ids.to(device), valid.to(device)  # built on the host row by row, moved once
            total = first_logp[ids[:, 0]].double()
            if S > 1:
                cache = copy.deepcopy(cache0)
                cache.batch_repeat_interleave(len(chunk))
                att = torch.cat([torch.ones((len(chunk), P), dtype=torch.long, device=device), valid.long()], 1)
                pos = torch.arange(P, P + S, device=device).unsqueeze(0).repeat(len(chunk), 1)
                logits = model(input_ids=ids, past_key_values=cache, attention_mask=att, position_ids=pos).logits
                lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
                total = total + (lp * valid[:, 1:]).sum(1).double()
            for j, (i, _) in enumerate(chunk):
                out[i] = -float(total[j]) / math.log(2)
            if progress is not None:
                progress(len(chunk))
    return out


def scores(model, tokenizer, prefix: str, secrets: list[str], suffix: str, batch_size: int = 256,
           framing: str = "bos_eos") -> np.ndarray:
    """Membership score of each canary: -log-perplexity (higher = member)."""
    return -log_perplexities(model, tokenizer, prefix, secrets, suffix, batch_size, framing=framing)


def enumerate_space(alphabet: str, length: int):
    """Every secret of the randomness space, in a fixed order."""
    return ("".join(t) for t in itertools.product(alphabet, repeat=length))
