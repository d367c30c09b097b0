"""Task-side token helpers (torch only): the closed-choice target marker and summed token NLLs of texts.
Padding and the BOS id come from :mod:`dpaudit.tokens`, shared with the attacks."""

from __future__ import annotations

import torch

from dpaudit.tokens import frame_text, model_device, pad_batch

# Record targets at or below CHOICE_BASE mark a closed-choice answer: target CHOICE_BASE - k means "the
# token here is choices[k]", scored by a softmax over the record's ``choices`` tokens only (Li et al.'s
# prompt-based fine-tuning: p(y | x) is a softmax over the label words' logits, not the vocabulary).
CHOICE_BASE = -1000


@torch.inference_mode()
def sequence_nll(model, tokenizer, texts: list[str], batch_size: int = 64, max_len: int = 64) -> list[tuple[float, int]]:
    """(summed NLL in nats, number of tokens) of BOS + text + EOS for each text."""
    model.eval()
    device = model_device(model)
    seqs = [frame_text(tokenizer, t)[:max_len] for t in texts]
    out: list[tuple[float, int]] = [(0.0, 0)] * len(seqs)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        ids, mask, pos = pad_batch([seqs[i] for i in idx], tokenizer.pad_token_id, device)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1].float()
        lp = logits.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
        valid = mask[:, 1:].bool()
        for j, i in enumerate(idx):
            out[i] = (-float(lp[j][valid[j]].sum()), int(valid[j].sum()))
    return out
