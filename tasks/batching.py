"""Token batches for task metrics (torch only): the BOS id, right-padded batches with per-example
position ids, and summed/mean token log-probabilities. Tasks use these instead of the attack code so
that ``tasks/`` imports nothing of ours but its own modules (DESIGN.md)."""

from __future__ import annotations

import torch

# Record targets at or below CHOICE_BASE mark a closed-choice answer: target CHOICE_BASE - k means "the
# token here is choices[k]", scored by a softmax over the record's ``choices`` tokens only (Li et al.'s
# prompt-based fine-tuning: p(y | x) is a softmax over the label words' logits, not the vocabulary).
CHOICE_BASE = -1000


def bos_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def pad_batch(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids) for right-padded sequences."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), L), dtype=torch.long)
    for j, s in enumerate(seqs):
        ids[j, : len(s)] = torch.tensor(s)
        mask[j, : len(s)] = 1
    return ids, mask, torch.arange(L).unsqueeze(0).repeat(len(seqs), 1)


@torch.inference_mode()
def sequence_nll(model, tokenizer, texts: list[str], batch_size: int = 64, max_len: int = 64) -> list[tuple[float, int]]:
    """(summed NLL in nats, number of tokens) of BOS + text + EOS for each text."""
    model.eval()
    seqs = [([bos_id(tokenizer)] + tokenizer(t, add_special_tokens=False).input_ids + [tokenizer.eos_token_id])[:max_len]
            for t in texts]
    out: list[tuple[float, int]] = [(0.0, 0)] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, mask, pos = pad_batch([seqs[i] for i in idx], tokenizer.pad_token_id)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1].float()
        lp = logits.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
        valid = mask[:, 1:].bool()
        for j, i in enumerate(idx):
            out[i] = (-float(lp[j][valid[j]].sum()), int(valid[j].sum()))
    return out
