"""An attack of one's own, through the public calls only (docs/architecture.md, "Extension points"): registered,
named in the plan fixed before training, scored, audited in the family, rendered; never in a default plan."""

from __future__ import annotations

import types

import numpy as np
import pytest

from dpaudit import api
from dpaudit.errors import DpauditError


def _toy():
    """The log-probability of the last scored token only (a legitimate, if weak, outputs-only attack)."""
    return types.SimpleNamespace(NAME="last_token", NEEDS_MOMENTS=False,
                                 from_features=lambda feats, texts=None, **_: np.array([float(f.logp[-1]) for f in feats]))


@pytest.fixture
def registered():
    remove = api.register_attack(_toy())
    yield
    remove()


def test_a_registered_attack_runs_end_to_end_in_the_planned_family(registered):
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(256)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    man = api.new_canaries(m=40, seed=1, attacks=["loss", "last_token"])
    assert "last_token" not in api.new_canaries(m=40, seed=1).plan.evaluation["attacks"]  # never by default
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private")
    r = api.evaluate(model, tok, card, man)
    rows = [e for e in r["empirical"] if e["attack"] == "last_token"]
    assert rows and rows[0]["tier"] == "outputs only" and rows[0]["bonferroni_tests"] == 2
    assert r["audit_plan"]["status"] == "as planned" and "last_token" in r["attacks"]


def test_registration_refuses_bad_names_and_incomplete_protocols(registered):
    with pytest.raises(DpauditError, match="already registered"):
        api.register_attack(_toy())
    for bad in ("Loss!", "whitebox_x", "", None):
        with pytest.raises(DpauditError, match="NAME"):
            api.register_attack(types.SimpleNamespace(NAME=bad, NEEDS_MOMENTS=False, from_features=len))
    with pytest.raises(DpauditError, match="NEEDS_MOMENTS"):
        api.register_attack(types.SimpleNamespace(NAME="other", NEEDS_MOMENTS="no", from_features=len))


def test_removed_attacks_are_unknown_again():
    remove = api.register_attack(_toy())
    remove()
    with pytest.raises(DpauditError, match="unknown attack 'last_token'"):
        api.new_canaries(m=40, seed=1, attacks=["loss", "last_token"])
