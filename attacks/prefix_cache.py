"""A shared prefix's key/value cache, reused only where it gives what a full forward gives.

The exposure scorers run the canary prefix once and score every candidate secret on its cache
(attacks/exposure.py, attacks/exposure_trie.py). That needs a transformers ``Cache`` that can be repeated and
selected by batch row, and a model whose forward continues from it. Some causal LMs have neither: a recurrent
state-space model (Mamba) returns a state of another kind, a model saved without ``use_cache`` support returns
none. :func:`serves` checks the reuse on two tokens against the full forward before it is trusted, and
:func:`full_log_probs` is the scorer without any cache (every candidate's whole sequence, in batches).
"""

from __future__ import annotations

import copy

import torch

LOGIT_BUDGET = 1 << 26  # float32 logits per full forward (256 MiB): the batch shrinks for long tails and vocabularies
TOLERANCE = 1e-3  # relative to the logits' scale, float32 and float64 (kernels of other shapes round differently)
HALF_TOLERANCE = 5e-2  # float16 and bfloat16 (8-bit mantissas: a cache that is not continued moves logits by O(1))


@torch.inference_mode()
def serves(model, shared: list[int], device) -> tuple[bool, object]:
    """(whether the cache of ``shared`` serves the scorers, the prefix's forward output).

    Args:
        model: The causal LM, in eval mode.
        shared: The token ids every candidate starts with (at least one).
        device: The model's device.

    Returns:
        ``(ok, out)``: ``ok`` when the cache can be repeated and row-selected and one token scored on it gives the
        full forward's logits for two different tokens; ``out`` the prefix's output (its logits are used either way).
    """
    P = len(shared)
    out = model(input_ids=torch.tensor([shared], device=device),
                attention_mask=torch.ones((1, P), dtype=torch.long, device=device), use_cache=True)
    cache = getattr(out, "past_key_values", None)
    if cache is None or not all(callable(getattr(cache, f, None)) for f in ("batch_repeat_interleave",
                                                                            "batch_select_indices")):
        return False, out
    vocab = int(out.logits.shape[-1])
    nxt = torch.tensor([[shared[-1] % vocab], [(shared[-1] + 1) % vocab]], device=device)
    try:
        two = copy.deepcopy(cache)
        two.batch_repeat_interleave(2)
        two.batch_select_indices(torch.arange(2, device=device))
        att = torch.ones((2, P + 1), dtype=torch.long, device=device)
        pos = torch.full((2, 1), P, dtype=torch.long, device=device)
        cached = model(input_ids=nxt, past_key_values=two, attention_mask=att, position_ids=pos).logits[:, -1]
    except Exception:  # noqa: BLE001 - a cache the model cannot continue from is the case this test is for
        return False, out
    full = model(input_ids=torch.cat([torch.tensor([shared, shared], device=device), nxt], 1),
                 attention_mask=torch.ones((2, P + 1), dtype=torch.long, device=device)).logits[:, -1]
    scale = float(full.float().abs().max()) or 1.0
    tol = TOLERANCE if full.dtype in (torch.float32, torch.float64) else HALF_TOLERANCE
    return bool(float((cached.float() - full.float()).abs().max()) <= tol * scale), out


@torch.inference_mode()
def full_log_probs(model, shared: list[int], tails: list[list[int]], pad: int, device,
                   batch_size: int) -> torch.Tensor:
    """Natural-log P(tail | shared) for each tail, summed over its tokens, by full forwards of ``shared + tail``
    (right-padded, ``batch_size`` at a time): the scorer where the prefix's cache cannot be reused.

    Args:
        model: The causal LM, in eval mode.
        shared: The prefix every tail continues (at least one token).
        tails: Each candidate's scored tokens (at least one each).
        pad: The pad token id (masked out).
        device: The model's device.
        batch_size: Sequences per forward pass.

    Returns:
        A float64 tensor on the CPU, one sum per tail.
    """
    P = len(shared)
    head = model.get_output_embeddings()
    vocab = int(head.weight.shape[0]) if head is not None else int(model.config.vocab_size)
    width = P + max((len(t) for t in tails), default=1)
    batch_size = max(1, min(batch_size, LOGIT_BUDGET // (width * vocab)))  # every position's logits are computed
    out = torch.empty(len(tails), dtype=torch.float64)
    for a in range(0, len(tails), batch_size):
        chunk = tails[a:a + batch_size]
        S = max(len(t) for t in chunk)
        ids = torch.full((len(chunk), P + S), pad, dtype=torch.long)
        valid = torch.zeros((len(chunk), S), dtype=torch.bool)
        ids[:, :P] = torch.tensor(shared)
        for j, t in enumerate(chunk):
            ids[j, P:P + len(t)] = torch.tensor(t)
            valid[j, :len(t)] = True
        att = torch.cat([torch.ones((len(chunk), P), dtype=torch.long), valid.long()], 1)
        logits = model(input_ids=ids.to(device), attention_mask=att.to(device)).logits[:, P - 1:P + S - 1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, P:].to(device).unsqueeze(-1)).squeeze(-1)
        out[a:a + len(chunk)] = (lp * valid.to(device)).sum(1).double().cpu()
    return out
