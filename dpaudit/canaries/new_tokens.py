"""New-token canaries: the manifest's own tokens added to a tokenizer and a model before training.

Each canary of a ``new-token`` manifest owns ``length`` tokens no other record contains (Panda et al., ICLR
2025: the easiest canaries to memorise). Every canary's tokens are added, held-out ones too, so that inserted and
held-out secrets differ only by whether training saw them. The new embedding rows (input and, untied, output)
start from the mean of the existing rows plus Gaussian noise with the rows' per-coordinate spread, drawn from the
manifest's seed: the same manifest extends the same base model identically, so ``dpaudit evaluate`` rebuilds the
model as it was before training (the reference attack's base) without any file of the run. The noise makes the
tokens distinguishable, so that a model that trains only adapters (LoRA) can still single one out. A manifest with
``init = "zero"`` (the final-weights design, Panda et al.'s) starts every new row at zero instead: every held-out
canary's rows then start, and stay up to the shared push of the softmax and the noise, identical, and the final
checkpoint's rows are their change since initialisation (dpaudit/evaluation/final_weights.py).

Use it in any training loop before the optimizer is built (``dpaudit.api.add_canary_tokens``); dpaudit's trainers
call it in ``trainers/fit.base_model``. The extended tokenizer is saved with the checkpoint.
"""

from __future__ import annotations

from dpaudit.errors import DpauditError


def add(model, tokenizer, manifest) -> int:
    """Add the manifest's new tokens to ``tokenizer`` and ``model``, in place (before training; a no-op for
    designs other than ``new-token``).

    Args:
        model: The Hugging Face model to train; its embeddings (and an untied output layer) grow by one row per
            token, initialised as the manifest says (``init``: zero or its seeded draw).
        tokenizer: The tokenizer the model was built with.
        manifest: The :class:`Manifest` of ``new_canaries(design="new-token")``.

    Returns:
        How many tokens were added (0 when the pair already holds all of them: a checkpoint's own).

    Raises:
        DpauditError: A tokenizer that holds some of the tokens already, or one of another size than the model's
            embedding.
    """
    import torch

    tokens = manifest.new_tokens()
    if not tokens:
        return 0
    vocab = tokenizer.get_vocab()
    present = [t for t in tokens if t in vocab]
    if present:
        if len(present) == len(tokens) and model.get_input_embeddings().weight.shape[0] >= len(tokenizer):
            return 0  # already extended (a checkpoint's own tokenizer and model)
        raise DpauditError(f"the tokenizer already holds {len(present)} of the manifest's {len(tokens)} new tokens; "
                           "extend the base model's own tokenizer once, with every canary's tokens")
    old = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) != old:
        raise DpauditError(f"the tokenizer has {len(tokenizer)} tokens but the model embeds {old}; new-token canaries "
                           "need the tokenizer the model was built with")
    from tokenizers import AddedToken

    added = tokenizer.add_tokens([AddedToken(t, single_word=False, normalized=False) for t in tokens])
    if added != len(tokens):
        raise DpauditError(f"the tokenizer added {added} of {len(tokens)} new canary tokens")
    gen = torch.Generator().manual_seed(int(manifest.plan.seed) % (2 ** 63))
    model.resize_token_embeddings(old + added, mean_resizing=False)
    for emb in _embeddings(model):
        w = emb.weight
        with torch.no_grad():
            if manifest.plan.init == "zero":  # every canary's rows start equal: a held-out canary's row stays
                w[old:] = 0.0  # where no gradient of its own moved it (the final-weights design)
                continue
            base = w[:old].double()
            noise = torch.randn(added, w.shape[1], generator=gen, dtype=torch.float64)
            w[old:] = (base.mean(0) + noise * base.std(0)).to(w.dtype).to(w.device)
    return added


def _embeddings(model) -> list:
    """The input embedding and, when it is a separate matrix, the output embedding."""
    inp = model.get_input_embeddings()
    out = model.get_output_embeddings()
    if out is None or out.weight is inp.weight or out.weight.data_ptr() == inp.weight.data_ptr():
        return [inp]
    return [inp, out]


def token_ids(tokenizer, manifest) -> list[int]:
    """The ids of the manifest's new tokens in ``tokenizer`` (extended by :func:`add`), in canary order."""
    vocab = tokenizer.get_vocab()
    tokens = manifest.new_tokens()
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise DpauditError(f"the tokenizer lacks {len(missing)} of the manifest's {len(tokens)} new tokens; extend it "
                           "with dpaudit.api.add_canary_tokens before encoding the canaries")
    return [vocab[t] for t in tokens]


def secret_only(targets: list[int], input_ids: list[int], new_ids) -> list[int]:
    """A canary record's targets with every position but its new tokens' set to -100 (ignored): the training loss
    of ``train_on = "secret"`` reads the secret only (Panda et al.), so the canary's clipped gradient goes to its own
    output rows rather than to the prefix. ``targets`` is aligned with ``input_ids`` (a target at position p is the
    token the model predicts there from positions before it, as in dpaudit's records and Hugging Face labels)."""
    new = set(int(i) for i in new_ids)
    out = [int(t) if int(i) in new else -100 for t, i in zip(targets, input_ids)]
    if all(t == -100 for t in out):
        raise DpauditError("a canary record holds none of its new tokens (cut by max_len?); shorten the canary's "
                           "random prefix or raise the model's max_len")
    return out
