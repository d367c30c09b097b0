"""The post-hoc audits' records fitted to the model before scoring, each rule reading a record's text alone.

A context longer than the model's positions is cut from the left (the same cut for an identifier and its fresh
draw); a split record longer than them is scored on its first tokens, as a training loop's truncation cut it; a
record of one token is left out (nothing after it to predict); a text that occurs more than once in the pool is
left out wherever it fell (one coin would move every copy: a group, not one record). None of the rules reads a
record's membership, so the units kept are exchangeable as the ones given were (dpaudit/evaluation/posthoc.py).
"""

from __future__ import annotations

from dpaudit.errors import DpauditError

MAX_TOKENS = 512  # tokens a post-hoc record is scored on at most (a training loop cut records to its own length too)


def token_limit(ck) -> int:
    """Tokens a post-hoc audit scores a sequence on: the model's positions, at most :data:`MAX_TOKENS` (a folder
    that does not state its positions: MAX_TOKENS)."""
    return min(ck.positions() or MAX_TOKENS, MAX_TOKENS)


def _n_tokens(tok, text: str) -> int:
    return len(tok(text).input_ids)  # the "tokenizer" framing: with the special tokens the tokenizer adds itself


def drop_repeated(members: list[str], held_out: list[str]) -> tuple[list[str], list[str], int]:
    """(members, held-out records, how many were left out): a record whose text occurs more than once in the two
    files together is left out wherever it occurs. Two copies share one text, so one coin would move both scores:
    a group, not one record. The rule reads the pool of texts alone (both sides together), never which side a copy
    fell on, so the records kept are a fair coin's as the records given were."""
    from collections import Counter

    count = Counter(members + held_out)
    keep = [t for t in members if count[t] == 1], [t for t in held_out if count[t] == 1]
    return keep[0], keep[1], len(members) + len(held_out) - len(keep[0]) - len(keep[1])


def fit_records(tok, texts: list[str], limit: int) -> tuple[list[str], int, int]:
    """(the records fitted to ``limit`` tokens, how many were cut, how many were left out): a record longer than
    the context is cut to its first ``limit`` tokens (as a training loop's truncation cuts it), a record with no
    token after its first is left out (a causal LM predicts nothing of it). Both rules read a record's text alone,
    never its membership, so the records kept are a fair coin's as the records given were."""
    if not texts:  # every record of a side repeated (a tokenizer given no text fails inside transformers)
        return [], 0, 0
    enc = tok(texts, return_offsets_mapping=True)
    kept, cut, dropped = [], 0, 0
    for text, ids, offs in zip(texts, enc["input_ids"], enc["offset_mapping"]):
        if len(ids) < 2:
            dropped += 1
            continue
        if len(ids) > limit:
            end = max([e for _, e in offs[:limit]] + [1])
            while end > 1 and _n_tokens(tok, text[:end]) > limit:  # a boundary token may re-split: shrink
                end -= 1
            text, cut = text[:end], cut + 1
        kept.append(text)
    return kept, cut, dropped


def fit_context(tok, ctx: str, a: str, b: str, limit: int) -> str:
    """``ctx`` cut from the left until both ``ctx + a`` and ``ctx + b`` fit in ``limit`` tokens (the identifier and
    its fresh draw keep the same context); refused when the identifier alone does not fit."""
    while ctx and max(_n_tokens(tok, ctx + a), _n_tokens(tok, ctx + b)) > limit:
        over = max(_n_tokens(tok, ctx + a), _n_tokens(tok, ctx + b)) - limit
        offs = tok(ctx, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        start = offs[min(over, len(offs) - 1)][0] if offs else len(ctx)
        ctx = ctx[max(start, 1):]
    if max(_n_tokens(tok, ctx + a), _n_tokens(tok, ctx + b)) > limit:
        raise DpauditError(f"an identifier alone is longer than the model's context of {limit} tokens; audit a "
                           "shorter --format")
    return ctx


def fit_split(tok, members: list[str], held_out: list[str], limit: int) -> tuple[list[str], list[str], dict]:
    """The stated split's records after every rule above, and what each rule left out or cut (the report's
    ``posthoc.dropped``): ``audit split`` and its ``--rescore`` build their units through this one function."""
    members, held_out, repeated = drop_repeated(members, held_out)
    members, cut_in, short_in = fit_records(tok, members, limit)
    held_out, cut_out, short_out = fit_records(tok, held_out, limit)
    return members, held_out, {"repeated records (a group, not one record)": repeated,
                               "records of one token (nothing to score)": short_in + short_out,
                               f"records cut to their first {limit} tokens (scored, not left out)": cut_in + cut_out}
