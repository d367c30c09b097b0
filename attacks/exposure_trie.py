"""Exact log-probability of every secret of the randomness space, by a token trie.

Every candidate text is ``prefix + secret + suffix``; its secret tokens are the scored tokens that start before
the secret ends (the first scored token as in :func:`dpaudit.attacks.scoring.encode`; a token that straddles the
secret's end and the suffix is kept, the tokens after it are not). The secrets' token paths form a trie under
the shared (unscored) prefix. The probability of a node's every child is in the node's logits, so a forward
pass is needed only for *internal* nodes (one new token each, on top of its parent's key/value cache, batched
level by level, depth first so that at most one chunk per level is held; where the cache serves:
attacks/prefix_cache.py, else every secret's whole sequence), never for leaves: about
|space| / |alphabet| passes instead of |space| x (tokens per candidate). **The suffix is not scored**: this gives
log2 P(secret tokens | prefix), the quantity exposure ranks when ``suffix_scored`` is False in the report.

Torch and NumPy; the device is the model's.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch

from dpaudit.attacks import prefix_cache
from dpaudit.attacks.scoring import owns
from dpaudit.tokens import bos_id, model_device, pad_id


def secret_paths(tokenizer, prefix: str, secrets: list[str], suffix: str, framing: str = "bos_eos",
                 chunk: int = 50_000) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """(shared prefixes, group of each secret, paths) for every secret: ``paths`` is an (n, L) int64 array of
    secret tokens padded with -1. Tokenised in context, with the same framing rules as the scorers."""
    own = framing == "tokenizer"
    start, groups, group_of, rows = len(prefix), {}, np.empty(len(secrets), dtype=np.int64), []
    bos = None if own else bos_id(tokenizer)
    for a in range(0, len(secrets), chunk):
        for j, (ids, offs) in enumerate(_encode(tokenizer, [f"{prefix}{s}{suffix}" for s in secrets[a:a + chunk]],
                                                own)):
            end = start + len(secrets[a + j])
            full = list(ids) if own else [bos] + list(ids)
            offs = list(offs) if own else [(0, 0)] + list(offs)
            first = next(k for k in range(1, len(full)) if offs[k][1] > start)
            last = first  # the run of real (non-empty) tokens from the first scored one that start in the secret
            while last + 1 < len(full) and offs[last + 1][0] < end and offs[last + 1][1] > offs[last + 1][0]:
                last += 1
            key = tuple(full[:first])
            group_of[a + j] = groups.setdefault(key, len(groups))
            rows.append(full[first:last + 1])
    width = max(len(r) for r in rows)
    paths = np.full((len(rows), width), -1, dtype=np.int64)
    for i, r in enumerate(rows):
        paths[i, : len(r)] = r
    return list(groups), group_of, paths


def _encode(tokenizer, texts: list[str], own: bool):
    """(ids, offsets) of each text: the Rust tokenizer directly when there is one (the same encodings as
    ``tokenizer(texts, return_offsets_mapping=True)`` without its per-text Python conversion)."""
    fast = getattr(tokenizer, "_tokenizer", None)
    if fast is not None and hasattr(fast, "encode_batch") and getattr(fast, "truncation", 1) is None \
            and getattr(fast, "padding", 1) is None:
        return [(e.ids, e.offsets) for e in fast.encode_batch(texts, add_special_tokens=own)]
    enc = tokenizer(texts, add_special_tokens=own, return_offsets_mapping=True)
    return list(zip(enc["input_ids"], enc["offset_mapping"]))


class _Trie:
    """Level d: node ids 0..n_d-1 (sorted by (parent, token), so the children of a run of parents are a run);
    ``node[d][i]`` the depth-d node of secret i (-1 when its path is shorter than d + 1 tokens)."""

    def __init__(self, paths: np.ndarray, vocab: int):
        n, width = paths.shape
        lengths = (paths >= 0).sum(1)
        self.paths, self.lengths = paths, lengths
        self.node = [np.zeros(n, dtype=np.int64)]  # everyone starts at the root
        self.parent, self.token, self.count = [np.zeros(1, dtype=np.int64)], [np.full(1, -1)], [1]
        for d in range(1, width):
            inner = lengths > d  # secrets whose token at depth d is read from an internal node's logits
            key = np.where(inner, self.node[d - 1] * vocab + paths[:, d - 1].clip(min=0), -1)
            uniq, inv = np.unique(key[inner], return_inverse=True)
            nd = np.full(n, -1, dtype=np.int64)
            nd[inner] = inv
            self.node.append(nd)
            self.parent.append(uniq // vocab)
            self.token.append(uniq % vocab)
            self.count.append(len(uniq))
        # per depth, the secrets sorted by their node (a node run's secrets are a contiguous run)
        keyed = [np.where(nd >= 0, nd, np.iinfo(np.int64).max) for nd in self.node]
        self.order = [np.argsort(k, kind="stable") for k in keyed]
        self.starts = [np.searchsorted(k[o], np.arange(c + 1)) for k, o, c in zip(keyed, self.order, self.count)]

    @property
    def internal_nodes(self) -> int:
        return int(sum(self.count))


@torch.inference_mode()
def log_probs(model, tokenizer, prefix: str, secrets: list[str], suffix: str, batch_size: int = 1024,
              framing: str = "bos_eos", progress=None, stats: dict | None = None,
              shard: tuple[int, int] | None = None, on_total=None) -> np.ndarray:
    """Bits of -log2 P(secret tokens | BOS + prefix) for each secret (suffix not scored), exactly, by the trie.
    ``stats``, when given, receives the number of forward passes (``nodes``) and of shared prefixes.
    ``shard = (i, n)`` expands only the top-level batches b (of depth-1 nodes, ``batch_size`` at a time) with
    b mod n = i, with everything under them batched as in one process (the same numbers); the secrets of other
    shards are NaN, one-token secrets belong to shard 0.
    Over 8 parameters: the template's three parts and the candidates, then keyword options of the batching, framing, progress and sharding."""
    model.eval()
    device = model_device(model)
    shared, group_of, paths = secret_paths(tokenizer, prefix, secrets, suffix, framing)
    out = np.full(len(secrets), np.nan)
    vocab = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None \
        else int(model.config.vocab_size)
    for g, key in enumerate(shared):
        idx = np.flatnonzero(group_of == g)
        trie = _Trie(paths[idx], max(vocab, int(paths.max()) + 1))
        if on_total is not None and shard is None:  # the forward passes this group adds (a progress bar's total)
            on_total(trie.internal_nodes)
        total = np.zeros(len(idx))
        cached, pre = prefix_cache.serves(model, list(key), device)
        if not cached:  # a model whose cache cannot be reused (Mamba): every secret's whole sequence, same numbers
            total = prefix_cache.full_log_probs(model, list(key), [[int(t) for t in p if t >= 0] for p in paths[idx]],
                                                pad_id(tokenizer), device, batch_size).numpy()
            if progress is not None:
                progress(trie.internal_nodes)
        else:
            _read(trie, 0, 0, torch.log_softmax(pre.logits[:, -1].float(), -1), total)
            if progress is not None:
                progress(1)
        if cached and len(trie.count) > 1:
            _expand(model, trie, 1, 0, trie.count[1], pre.past_key_values, np.zeros(trie.count[1], dtype=np.int64),
                    len(key), total, batch_size, device, progress, shard)
        mine = _owned(trie, shard, batch_size)
        out[idx[mine]] = -total[mine] / math.log(2)
        if stats is not None:
            stats["nodes"] = stats.get("nodes", 0) + trie.internal_nodes
    if stats is not None:
        stats["groups"] = len(shared)
    return out


def _read(trie: _Trie, d: int, a: int, logp: torch.Tensor, total: np.ndarray) -> None:
    """Add log P(token at depth d | node) for every secret under depth-d nodes a .. a + len(logp) - 1."""
    lo, hi = trie.starts[d][a], trie.starts[d][a + logp.shape[0]]
    sec = trie.order[d][lo:hi]
    if sec.size == 0:
        return
    rows = torch.as_tensor(trie.node[d][sec] - a, device=logp.device)
    cols = torch.as_tensor(trie.paths[sec, d], device=logp.device)
    total[sec] += logp[rows, cols].double().cpu().numpy()


def _expand(model, trie: _Trie, d: int, a: int, b: int, parent_cache, parent_rows: np.ndarray, offset: int,
            total: np.ndarray, batch_size: int, device, progress, shard: tuple[int, int] | None = None) -> None:
    """Forward depth-d nodes a .. b-1 (one token each on their parents' cache rows ``parent_rows``), read their
    children's probabilities, and recurse into their internal children, ``batch_size`` nodes at a time (at the
    top level only the batches ``shard`` owns).
    Over 8 parameters: the recursion's state (the trie, the depth, the node range, the parents' cache rows and offset, the running totals) threaded through each call; internal."""
    for s in range(a, b, batch_size):
        if not owns(shard, s // batch_size):
            continue
        e = min(b, s + batch_size)
        cache = copy.deepcopy(parent_cache)
        cache.batch_select_indices(torch.as_tensor(parent_rows[s - a:e - a], device=device))
        ids = torch.as_tensor(trie.token[d][s:e], device=device).unsqueeze(1)
        pos = torch.full((e - s, 1), offset + d - 1, device=device, dtype=torch.long)
        res = model(input_ids=ids, past_key_values=cache, position_ids=pos, use_cache=True)
        _read(trie, d, s, torch.log_softmax(res.logits[:, -1].float(), -1), total)
        if progress is not None:
            progress(e - s)
        if d + 1 < len(trie.count):
            par = trie.parent[d + 1]
            c0, c1 = np.searchsorted(par, s), np.searchsorted(par, e)
            if c1 > c0:
                _expand(model, trie, d + 1, int(c0), int(c1), res.past_key_values, par[c0:c1] - s, offset, total,
                        batch_size, device, progress)
        del cache, res


def _owned(trie: _Trie, shard: tuple[int, int] | None, batch_size: int) -> np.ndarray:
    """Which of the trie's secrets ``shard`` completes: those under its top-level batches of depth-1 nodes, and
    (shard 0) the one-token secrets read from the root alone."""
    n = len(trie.node[0])
    if shard is None:
        return np.ones(n, dtype=bool)
    if len(trie.node) < 2:
        return np.full(n, shard[0] == 0)
    top = trie.node[1]
    return np.where(top >= 0, (top // batch_size) % shard[1] == shard[0], shard[0] == 0)
