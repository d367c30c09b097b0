"""Batched token log-probabilities under a causal LM (torch only; shared by the attacks)."""

from __future__ import annotations

import torch


@torch.inference_mode()
def token_logprobs(model, tokenizer, texts: list[str], score_from_char: list[int] | None = None,
                   batch_size: int = 64, max_len: int | None = None) -> list[torch.Tensor]:
    """Natural-log probabilities of each scored token of each text (BOS prepended, EOS appended).

    With ``score_from_char[i] = c``, only tokens whose character span ends after c are scored (the
    secret and what follows a shared prefix); otherwise every token after BOS, EOS included.
    """
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    model.eval()
    out: list[torch.Tensor] = []
    for start in range(0, len(texts), batch_size):
        chunk = texts[start:start + batch_size]
        enc = tokenizer(chunk, add_special_tokens=False, return_offsets_mapping=True)
        seqs, masks = [], []
        for j, (ids, offs) in enumerate(zip(enc["input_ids"], enc["offset_mapping"])):
            full = [bos] + list(ids) + [tokenizer.eos_token_id]
            if score_from_char is None:
                scored = [False] + [True] * (len(ids) + 1)
            else:
                c = score_from_char[start + j]
                scored = [False] + [e > c for (_, e) in offs] + [True]
            if max_len is not None:
                full, scored = full[:max_len], scored[:max_len]
            seqs.append(full)
            masks.append(scored)
        L = max(len(s) for s in seqs)
        ids_t = torch.full((len(seqs), L), tokenizer.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(seqs), L), dtype=torch.long)
        for j, s in enumerate(seqs):
            ids_t[j, : len(s)] = torch.tensor(s)
            att[j, : len(s)] = 1
        pos = torch.arange(L).unsqueeze(0).repeat(len(seqs), 1)
        logits = model(input_ids=ids_t, attention_mask=att, position_ids=pos).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)
        tgt_lp = logp.gather(-1, ids_t[:, 1:].unsqueeze(-1)).squeeze(-1)
        for j, m in enumerate(masks):
            sel = torch.tensor(m[1:], dtype=torch.bool)
            out.append(tgt_lp[j, : len(m) - 1][sel].clone())
    return out
