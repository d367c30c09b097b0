"""Token batches shared by task metrics (tasks/) and attacks (attacks/): the BOS id and right-padded
batches with per-example position ids. Torch and dpaudit.errors only, so both layers can
use it without depending on each other. Tensors are built on ``device`` (the model's)."""

from __future__ import annotations

import torch

from dpaudit.errors import DpauditError


def bos_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def pad_id(tokenizer) -> int:
    """The id right-padded positions hold: the tokenizer's pad token, else its EOS, else 0. Padded positions are
    masked out of attention and never scored, so any id in the vocabulary serves; a tokenizer without special
    tokens (a bare BPE) still pads."""
    for i in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if i is not None:
            return i
    return 0


def frame(tokenizer, ids) -> list[int]:
    """BOS + ``ids`` + EOS: how dpaudit's trainers feed a record (the ``bos_eos`` canary framing)."""
    if tokenizer.eos_token_id is None:
        raise DpauditError("the tokenizer defines no EOS token, which the bos_eos canary framing puts around each "
                           "record; set eos_token in the tokenizer's tokenizer_config.json, or score with "
                           "--canary-framing tokenizer (records framed by the tokenizer itself)")
    return [bos_id(tokenizer)] + list(ids) + [tokenizer.eos_token_id]


def frame_text(tokenizer, text: str) -> list[int]:
    """:func:`frame` of ``text`` tokenised without the tokenizer's own special tokens."""
    return frame(tokenizer, tokenizer(text, add_special_tokens=False).input_ids)


def context_limit(model, default=None):
    """The model's context in tokens: its config's ``n_positions`` or ``max_position_embeddings`` (the names
    transformers' configs use), else ``default`` (a model with no fixed limit, such as a recurrent one)."""
    cfg = getattr(model, "config", None)
    return next((getattr(cfg, k) for k in ("n_positions", "max_position_embeddings")
                 if isinstance(getattr(cfg, k, None), int)), default)


def model_device(model) -> torch.device:
    return next(p for p in model.parameters()).device


def pad_batch(seqs: list[list[int]], pad_id: int, device=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids) for right-padded sequences."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for j, s in enumerate(seqs):
        ids[j, : len(s)] = torch.tensor(s)
        mask[j, : len(s)] = 1
    pos = torch.arange(L).unsqueeze(0).repeat(len(seqs), 1)
    return ids.to(device), mask.to(device), pos.to(device)
