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
        DpauditError: A tokenizer that holds some of the tokens already, one with more tokens than the model
            embeds, or a model peft has wrapped already. A vocabulary padded beyond the tokenizer (Pythia, Qwen, Phi) gives its spare rows to the new
            tokens first and grows only where they do not suffice.
    """
    import torch

    from dpaudit import checks
    from dpaudit.canaries.manifest import as_manifest

    manifest = as_manifest(manifest, "add_canary_tokens")
    checks.hf_model(model, "add_canary_tokens")
    checks.hf_tokenizer(tokenizer, "add_canary_tokens")
    tokens = manifest.new_tokens()
    if not tokens:
        return 0
    vocab = tokenizer.get_vocab()
    present = [t for t in tokens if t in vocab]
    rows = model.get_input_embeddings().weight.shape[0]
    if present:
        if len(present) == len(tokens) and rows >= len(tokenizer):
            return 0  # already extended (a checkpoint's own tokenizer and model)
        raise DpauditError(f"the tokenizer already holds {len(present)} of the manifest's {len(tokens)} new tokens; "
                           "extend the base model's own tokenizer once, with every canary's tokens")
    if hasattr(model, "peft_config"):  # its embeddings are wrapped (modules_to_save, trainable tokens): no resize
        raise DpauditError("add_canary_tokens needs the model before peft wraps it: call it before get_peft_model, so "
                           "that the adapter (and modules_to_save) is built on the extended embeddings")
    known = len(tokenizer)  # the rows beyond it, where a vocabulary is padded (Pythia, Qwen, Phi), embed no token
    if known > rows:
        raise DpauditError(f"the tokenizer has {known} tokens but the model embeds {rows}; new-token canaries need "
                           "the tokenizer the model was built with")
    from tokenizers import AddedToken

    added = tokenizer.add_tokens([AddedToken(t, single_word=False, normalized=False) for t in tokens])
    if added != len(tokens):
        raise DpauditError(f"the tokenizer added {added} of {len(tokens)} new canary tokens")
    ids = torch.as_tensor(tokenizer.convert_tokens_to_ids(tokens))
    gen = torch.Generator().manual_seed(int(manifest.plan.seed) % (2 ** 63))
    if int(ids.max()) >= rows:  # a padded vocabulary's spare rows take the new tokens where they suffice
        model.resize_token_embeddings(int(ids.max()) + 1, mean_resizing=False)
    for emb in _embeddings(model):
        w = emb.weight
        with torch.no_grad():
            if manifest.plan.init == "zero":  # every canary's rows start equal: a held-out canary's row stays
                w[ids.to(w.device)] = 0.0  # where no gradient of its own moved it (the final-weights design)
                continue
            base = w[:known].double()  # the rows of the tokenizer's own tokens
            noise = torch.randn(added, w.shape[1], generator=gen, dtype=torch.float64)
            w[ids.to(w.device)] = (base.mean(0) + noise * base.std(0)).to(w.dtype).to(w.device)
    return added


def base_as_trained(model, tokenizer, manifest):
    """``model`` (the base before fine-tuning, read from a folder) extended by the manifest's new tokens as
    :func:`add` extended it before training, so that its rows are the trained model's initial state (a no-op for
    other designs and for a base already extended). The base model of the reference attack, of the final-weights
    scores' seeded initial rows and of a LoRA adapter's merge is read through this."""
    add(model, tokenizer, manifest)
    return model


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
    out = [int(t) if int(i) in new and p > 0 else -100 for p, (t, i) in enumerate(zip(targets, input_ids))]
    if all(t == -100 for t in out):  # the first position is never predicted: nothing comes before it
        where = "only as its first token, which nothing predicts" if int(input_ids[0]) in new else \
            "none of its new tokens (cut by max_len?)"
        raise DpauditError(f"a canary record holds {where}; give the canaries text before their secret "
                           "(random_prefix, a template prefix, or a BOS token) or raise the model's max_len")
    return out
