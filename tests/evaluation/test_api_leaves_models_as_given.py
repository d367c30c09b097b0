"""`api.evaluate(model, ...)` between epochs: scoring runs in eval mode, and the user's model went on training with
dropout off afterwards (evaluate left it in eval mode, silently); a reference model object too. Each submodule's
mode, and the weights' device, come back as they were given."""

from __future__ import annotations

import torch

from dpaudit import api
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.tasks.models import public_bpe_tokenizer


def _gpt2(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2))


def test_modes_and_devices_come_back_as_given(tmp_path):
    tok = public_bpe_tokenizer(256)
    model, reference = _gpt2(tok), _gpt2(tok)
    model.train()
    model.transformer.drop.eval()  # a user's own mixed modes (a frozen part in eval) are kept, not reset
    reference.train()
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, unit="record", accountant="none"), events=[],
                       method="non_private")
    manifest = api.new_canaries(m=16, seed=3, attacks=["loss", "reference"])
    before = {n: m.training for n, m in model.named_modules()}
    model.lm_head.weight.requires_grad_(False)  # tied to the embedding: frozen both
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    grads = {n: p.requires_grad for n, p in model.named_parameters()}
    r = api.evaluate(model, tok, card, manifest, reference=reference, device="cpu")
    assert r["verdict"]["status"] == "no-claim"
    assert {n: m.training for n, m in model.named_modules()} == before
    assert model.training and not model.transformer.drop.training and reference.training
    assert next(model.parameters()).device.type == "cpu"
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())  # nothing trained or merged in
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads
