"""Does a reference (base) model read the canaries as the audited model does?

The reference attack subtracts the base model's log-probabilities from the audited model's, the final-weights
scores read the base's rows of the new tokens, and ``base_metrics`` measures the base on the task: each feeds the
base the token ids the **audited** model's tokenizer gives. A base with another tokenizer would read other words
under those ids (a meaningless calibration), and one with a shorter context or fewer embedding rows would crash
on them (an IndexError, exit 3). Checked once, before any score, in one line naming the base.
"""

from __future__ import annotations

from dpaudit.errors import DpauditError
from dpaudit.tokens import context_limit


def check_reference(model, ref_tok, tok, manifest, where: str) -> None:
    """Refuse a reference model that cannot read the canaries as the audited model's tokenizer encodes them.

    Args:
        model: The reference model (extended by the manifest's new tokens where they own rows).
        ref_tok: Its own tokenizer (None for a model object given to the Python API: not compared).
        tok: The audited model's tokenizer (None: only the reference's own context is checked).
        manifest: The canaries.
        where: What to name in the error (the reference's folder).

    Raises:
        DpauditError: Another tokenizer, a context shorter than a canary, or an id beyond its embedding.
    """
    texts = [c.text for c in manifest.canaries]
    reader = tok if tok is not None else ref_tok
    if not texts or reader is None:
        return
    ids = reader(texts, add_special_tokens=False).input_ids
    if ref_tok is not None and tok is not None and ref_tok is not tok:
        own = ref_tok(texts, add_special_tokens=False).input_ids
        bad = next((i for i, (a, b) in enumerate(zip(ids, own)) if list(a) != list(b)), None)
        if bad is not None:
            raise DpauditError(f"the reference model at {where} has another tokenizer: it reads canary "
                               f"{manifest.canaries[bad].id} as other tokens than the audited model's; pass the base "
                               "model the checkpoint was fine-tuned from (--reference-model), with its tokenizer")
    from dpaudit.tasks.models import is_classifier

    longest = 0 if is_classifier(model) else max(len(s) for s in ids) + 2  # classifiers truncate; LMs add BOS, EOS
    limit = context_limit(model, None)
    if limit is not None and longest > limit:
        raise DpauditError(f"the reference model at {where} has a context of {limit} tokens, shorter than a canary "
                           f"({longest} with BOS and EOS); pass the base model the checkpoint was fine-tuned from")
    emb = model.get_input_embeddings()
    top = max((max(s) for s in ids if len(s)), default=-1)
    if emb is not None and top >= emb.num_embeddings:
        raise DpauditError(f"the reference model at {where} embeds {emb.num_embeddings} tokens, but the canaries use "
                           f"token {top}; pass the base model the checkpoint was fine-tuned from")
