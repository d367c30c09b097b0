"""Batched token features under a causal LM, shared by every black-box attack (torch only).

One forward pass per batch gives, for each scored token t of each text: log p(x_t | x_<t) and, when
asked (Min-K%++), the mean and standard deviation of log p(z | x_<t) over the vocabulary z ~ p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dpaudit import options
from dpaudit.tokens import frame, model_device, pad_batch, pad_id


@dataclass
class TokenFeatures:
    logp: torch.Tensor  # (n_scored,) natural log-probabilities of the actual tokens
    mu: torch.Tensor | None = None  # (n_scored,) E_z[log p(z)]
    sigma: torch.Tensor | None = None  # (n_scored,) sd_z[log p(z)]


FRAMINGS = options.FRAMINGS


def encode(tokenizer, texts: list[str], score_from_char: list[int] | None, max_len: int | None,
           framing: str = "bos_eos", spans: list[tuple[int, int]] | None = None):
    """Token ids and which positions are scored, per text. ``framing`` is how the model saw a record in training:
    ``bos_eos`` = BOS + text + EOS (dpaudit's trainers), ``tokenizer`` = ``tokenizer(text)`` with the special
    tokens it adds by itself (a Hugging Face training loop). The first token is never scored (no context).
    ``spans[i] = (a, b)`` scores only the tokens of text i that overlap characters a..b-1 (a canary's secret)."""
    if framing not in FRAMINGS:
        raise ValueError(f"unknown framing {framing!r}; one of {FRAMINGS}")
    own = framing == "tokenizer"
    enc = tokenizer(texts, add_special_tokens=own, return_offsets_mapping=True)
    seqs, masks = [], []
    for j, (ids, offs) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
        if spans is not None:
            a, b = spans[j]
            inside = [e > a and s < b and e > s for (s, e) in offs]  # special tokens have empty spans
            if own:
                full, scored = list(ids), [False] + inside[1:]
            else:
                full, scored = frame(tokenizer, ids), [False] + inside + [False]
        elif own:
            full = list(ids)
            if score_from_char is None:
                scored = [False] + [True] * (len(ids) - 1)
            else:
                c = score_from_char[j]
                scored = [False] + [e > c for (_, e) in offs[1:]]
        elif score_from_char is None:
            full = frame(tokenizer, ids)
            scored = [False] + [True] * (len(ids) + 1)
        else:
            full = frame(tokenizer, ids)
            c = score_from_char[j]
            scored = [False] + [e > c for (_, e) in offs] + [True]
        if max_len is not None:
            full, scored = full[:max_len], scored[:max_len]
        seqs.append(full)
        masks.append(scored)
    return seqs, masks


@torch.inference_mode()
def token_features(model, tokenizer, texts: list[str], score_from_char: list[int] | None = None,
                   batch_size: int = 64, max_len: int | None = None, moments: bool = False,
                   framing: str = "bos_eos", shard: tuple[int, int] | None = None,
                   spans: list[tuple[int, int]] | None = None) -> list[TokenFeatures | None]:
    """Features of each text's scored tokens (all tokens after BOS, EOS included, unless
    ``score_from_char[i] = c`` restricts them to tokens whose span ends after character c). ``shard = (i, n)``
    runs only the batches b with b mod n = i of the one-process batching (the same batches, so the same numbers)
    and leaves None for the other texts.
    Over 8 parameters: the model, tokenizer and texts, then keyword options of the one shared forward pass (span, batching, moments, framing, sharding)."""
    model.eval()
    device = model_device(model)
    all_seqs, all_masks = encode(tokenizer, texts, score_from_char, max_len, framing, spans)  # one tokenizer call
    order = sorted(range(len(texts)), key=lambda i: len(all_seqs[i]))  # equal lengths batch together: less padding
    results: dict[int, TokenFeatures] = {}
    for b, start in enumerate(range(0, len(order), batch_size)):
        if not owns(shard, b):
            continue
        idx = order[start:start + batch_size]
        seqs, masks = [all_seqs[i] for i in idx], [all_masks[i] for i in idx]
        ids, att, pos = pad_batch(seqs, pad_id(tokenizer), device)
        logits = model(input_ids=ids, attention_mask=att, position_ids=pos).logits.float()
        L, V = logits.shape[1], logits.shape[2]
        # the positions that predict a scored token (padding, the last position and unscored ones are skipped):
        # flat row b * L + t of the logits predicts token t + 1 of text b
        sel = torch.tensor([m[1:] + [False] * (L - len(m)) for m in masks], dtype=torch.bool, device=device)
        rows = sel.flatten().nonzero().squeeze(1)
        rows = rows + rows // max(L - 1, 1)  # (b, t) in the (B, L - 1) mask -> b * L + t in the (B, L) logits
        flat = logits.reshape(-1, V)
        stats = softmax_moments(flat, moments=moments, rows=rows)
        lse = stats[0] if moments else stats
        tgt = flat[rows, ids[:, 1:][sel]] - lse  # log p = logit - lse: no full log-softmax tensor
        if moments:  # log p(z) = logit(z) - lse, so its mean is E_p[logit] - lse and its sd is sd_p[logit]
            mu, sd = stats[1] - lse, stats[2].clamp_min(1e-12).sqrt()
        counts = sel.sum(1).tolist()
        parts = [x.split(counts) if x is not None else [None] * len(masks)
                 for x in (tgt, mu if moments else None, sd if moments else None)]
        for j, (t, u, v) in enumerate(zip(*parts)):
            results[idx[j]] = TokenFeatures(t, u, v)
    return [results.get(i) for i in range(len(texts))]


def owns(shard: tuple[int, int] | None, batch: int) -> bool:
    """Whether shard (i, n) runs batch number ``batch`` (round robin; None: one process runs all)."""
    return shard is None or batch % shard[1] == shard[0]


def softmax_moments(logits: torch.Tensor, chunk_bytes: int = 1 << 20, moments: bool = True,
                    rows: torch.Tensor | None = None) -> tuple:
    """(logsumexp, E_p[logit], Var_p[logit]) over the last axis, p = softmax(logits), in one sweep: rows are
    taken ``chunk_bytes`` of logits at a time, shifted by their maximum, exponentiated once into a reused buffer,
    and the three sums are read from it while it sits in cache (no vocabulary-sized temporary beyond the
    chunk's; the variance does not lose digits to a large mean). With ``moments`` False only the logsumexp
    (the same sweep, and faster than ``torch.logsumexp`` on a CPU). ``rows`` (indices into the flattened
    leading axes) restricts the sweep to those rows and returns flat (len(rows),) results. Float32 in, float32
    out."""
    shape, V = logits.shape[:-1], logits.shape[-1]
    flat = logits.reshape(-1, V)
    if rows is not None:
        shape = rows.shape
    n = flat.shape[0] if rows is None else rows.numel()
    step = max(1, min(max(n, 1), chunk_bytes // (4 * V)))
    lse = torch.empty(n, device=flat.device, dtype=flat.dtype)
    mean, var = (torch.empty_like(lse), torch.empty_like(lse)) if moments else (None, None)
    d, e = torch.empty(step, V, device=flat.device, dtype=flat.dtype), torch.empty(step, V, device=flat.device,
                                                                                    dtype=flat.dtype)
    for a in range(0, n, step):
        if rows is None:
            x = flat[a:a + step]
            r = x.shape[0]
            top = x.amax(dim=-1, keepdim=True)
            dd = torch.sub(x, top, out=d[:r])  # <= 0
        else:
            idx = rows[a:a + step]
            r = idx.numel()
            dd = torch.index_select(flat, 0, idx, out=d[:r])
            top = dd.amax(dim=-1, keepdim=True)
            dd.sub_(top)
        ee = torch.exp(dd, out=e[:r])  # unnormalised p
        s0 = ee.sum(-1)
        lse[a:a + r] = top.squeeze(-1) + s0.log()
        if moments:
            s1 = ee.mul_(dd).sum(-1) / s0
            s2 = ee.mul_(dd).sum(-1) / s0
            mean[a:a + r] = top.squeeze(-1) + s1
            var[a:a + r] = s2 - s1.square()
    if not moments:
        return lse.view(shape)
    return lse.view(shape), mean.view(shape), var.view(shape)


def token_logprobs(model, tokenizer, texts, score_from_char=None, batch_size: int = 64, max_len=None):
    return [f.logp for f in token_features(model, tokenizer, texts, score_from_char, batch_size, max_len)]
