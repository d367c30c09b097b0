"""Token batches shared by task metrics (tasks/) and attacks (attacks/): the BOS id and right-padded
batches with per-example position ids. Torch only; it imports nothing else of ours, so both layers can
use it without depending on each other. Tensors are built on ``device`` (the model's)."""

from __future__ import annotations

import torch


def bos_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def frame(tokenizer, ids) -> list[int]:
    """BOS + ``ids`` + EOS: how dpaudit's trainers feed a record (the ``bos_eos`` canary framing)."""
    return [bos_id(tokenizer)] + list(ids) + [tokenizer.eos_token_id]


def frame_text(tokenizer, text: str) -> list[int]:
    """:func:`frame` of ``text`` tokenised without the tokenizer's own special tokens."""
    return frame(tokenizer, tokenizer(text, add_special_tokens=False).input_ids)


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
