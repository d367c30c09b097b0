"""The pools of the token canary designs, chosen before training and recorded in the manifest.

Panda, Tang, Nasr, Choquette-Choo, Mittal, "Privacy auditing of large language models" (ICLR 2025): canaries a
model memorises easily make black-box audits of DP training non-trivial. Two of their designs draw secrets from
a pool of tokens (the third, ``new-token``, adds tokens: :mod:`dpaudit.canaries.new_tokens`):

* ``rare-token``: the base model's least likely tokens: the word tokens with the lowest mean next-token
  probability under the base model over public text (the BBC news texts the project ships).
* ``bigram`` (model-free): the most frequent word tokens of the public text, whose adjacent pairs in a secret
  never occur there (every pair seen in the text is recorded in ``excluded_pairs`` and never drawn).

Only *word tokens* enter a pool: a token that is a space followed by letters and that tokenises back to itself
between the canary's prefix and suffix, so that a secret of words joined by spaces is exactly those tokens in
the canary text (checked on the whole pool before it is recorded). The pool is a function of the tokenizer,
the base model (rare-token) and public text only, never of the private data. The manifest records the words and
how they were chosen (``pool_source``); the secrets then regenerate from the seed without any model.
"""

from __future__ import annotations

import dataclasses

from dpaudit.canaries.manifest import DEFAULT_POOL, POOL_DESIGNS, CanaryPlan
from dpaudit.errors import DpauditError

PUBLIC_TEXTS = 512  # BBC news texts read to rank the tokens (public; never the training data)
PUBLIC_TOKENS = 128  # tokens per text the base model reads for the rare-token ranking


def resolve(plan: CanaryPlan, tokenizer, model=None, texts: list[str] | None = None) -> CanaryPlan:
    """``plan`` with its pool chosen (unchanged for template and new-token plans, or when already chosen).
    ``model`` is the base model (needed by rare-token); ``texts`` the public text (default: the BBC texts)."""
    if plan.design not in POOL_DESIGNS or plan.resolved:
        return plan
    if not plan.prefix.endswith(" "):
        raise DpauditError(f"canary template prefix {plan.prefix!r} must end with a space for design {plan.design!r} "
                           "(its secrets are words); e.g. 'My secret words are {secret}.'")
    n = plan.pool or DEFAULT_POOL
    words = word_tokens(tokenizer, plan.prefix, plan.suffix)
    if texts is None:
        from dpaudit.tasks import assets

        texts = assets.bbc_texts()[:PUBLIC_TEXTS]
    if plan.design == "rare-token":
        if model is None:
            raise DpauditError("canaries.design 'rare-token' ranks tokens by the base model: pass the base model "
                               "(dpaudit canaries new --base-model PATH)")
        chosen, source = _rarest(model, tokenizer, words, texts, n)
        excluded: tuple = ()
    else:
        chosen, source, excluded = _bigram_pool(tokenizer, words, texts, n)
    if len(chosen) < n:
        raise DpauditError(f"the tokenizer has only {len(chosen)} usable word tokens for design {plan.design!r}; "
                           f"set canaries.pool to at most {len(chosen)}")
    symbols = tuple(w for _, w in chosen)
    _check_round_trip(tokenizer, plan, [i for i, _ in chosen], symbols)
    return dataclasses.replace(plan, pool=n, symbols=symbols, excluded_pairs=excluded, pool_source=source)


def word_tokens(tokenizer, prefix: str, suffix: str) -> list[tuple[int, str]]:
    """(id, word) of every token that is a space followed by ASCII letters (at least two) and that tokenises
    back to itself between ``prefix`` and ``suffix``."""
    special = set(tokenizer.all_special_ids)
    cands = []
    for tid in range(len(tokenizer)):
        if tid in special:
            continue
        s = tokenizer.decode([tid])
        w = s[1:]
        if s.startswith(" ") and len(w) >= 2 and w.isascii() and w.isalpha():
            cands.append((tid, w))
    if not cands:
        return []
    head = tokenizer(prefix.rstrip(" "), add_special_tokens=False).input_ids
    tail = tokenizer(suffix, add_special_tokens=False).input_ids if suffix else []
    got = tokenizer([prefix + w + suffix for _, w in cands], add_special_tokens=False).input_ids
    return [(tid, w) for (tid, w), ids in zip(cands, got) if ids == head + [tid] + tail]


def _rarest(model, tokenizer, words, texts, n):
    """The n word tokens with the lowest mean next-token probability under ``model`` over ``texts``."""
    from dpaudit.module_state import as_given

    with as_given(model):  # a base model object given to new_canaries goes back in its own mode
        return _rarest_scored(model, tokenizer, words, texts, n)


def _rarest_scored(model, tokenizer, words, texts, n):
    import torch

    from dpaudit.tokens import context_limit, frame, model_device, pad_batch, pad_id

    model.eval()
    device = model_device(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    total = torch.zeros(vocab, dtype=torch.float64)
    count = 0
    context = context_limit(model, PUBLIC_TOKENS)
    keep = min(PUBLIC_TOKENS, context)
    seqs = [frame(tokenizer, tokenizer(t, add_special_tokens=False).input_ids)[:keep] for t in texts if t]
    with torch.inference_mode():
        for a in range(0, len(seqs), 16):
            ids, att, pos = pad_batch(seqs[a:a + 16], pad_id(tokenizer), device)
            probs = model(input_ids=ids, attention_mask=att, position_ids=pos).logits.float().softmax(-1)
            total += (probs * att.unsqueeze(-1)).sum((0, 1)).double().cpu()
            count += int(att.sum())
    mean = (total / max(count, 1)).numpy()
    order = sorted(words, key=lambda x: (mean[x[0]], x[0]))
    return order[:n], (f"the {n} word tokens with the lowest mean next-token probability under the base model over "
                       f"{count:,} positions of {len(seqs)} public BBC news texts (of {len(words)} word tokens)")


def _bigram_pool(tokenizer, words, texts, n):
    """The n most frequent word tokens of ``texts`` and the ordered pairs of them seen adjacent there."""
    streams = tokenizer(list(texts), add_special_tokens=False).input_ids
    counts: dict[int, int] = {}
    for ids in streams:
        for t in ids:
            counts[t] = counts.get(t, 0) + 1
    chosen = sorted(words, key=lambda x: (-counts.get(x[0], 0), x[0]))[:n]
    pos = {tid: i for i, (tid, _) in enumerate(chosen)}
    seen = set()
    for ids in streams:
        for a, b in zip(ids, ids[1:]):
            if a in pos and b in pos:
                seen.add((pos[a], pos[b]))
    excluded = tuple(sorted(seen))
    return chosen, (f"the {n} most frequent word tokens of {len(texts)} public BBC news texts; the {len(excluded)} "
                    f"of their {n * n} ordered pairs that occur there are never drawn"), excluded


def _check_round_trip(tokenizer, plan: CanaryPlan, ids: list[int], symbols: tuple) -> None:
    """A secret of pool words is exactly those tokens in the canary text (checked on the whole pool, in order)."""
    head = tokenizer(plan.prefix.rstrip(" "), add_special_tokens=False).input_ids
    tail = tokenizer(plan.suffix, add_special_tokens=False).input_ids if plan.suffix else []
    step = max(1, plan.length)
    for a in range(0, len(symbols), step):
        text = plan.prefix + " ".join(symbols[a:a + step]) + plan.suffix
        if tokenizer(text, add_special_tokens=False).input_ids != head + ids[a:a + step] + tail:
            raise DpauditError(f"the words {symbols[a:a + step]} do not tokenise back to their own tokens in the "
                               "canary template; choose another template or tokenizer")

