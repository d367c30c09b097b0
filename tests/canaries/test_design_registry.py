"""A canary design of one's own, through the public calls only (docs/architecture.md, "Extension points"): registered
with dpaudit.api.register_canary_design, drawn by new_canaries, written and read back, scored and audited by
evaluate; the shipped designs draw exactly what they drew before the registry (their manifests regenerate)."""

from __future__ import annotations

import types

import pytest

from dpaudit import api
from dpaudit.canaries import manifest as canaries
from dpaudit.errors import DpauditError

WORDS = ("otter", "heron", "lynx", "marten", "ibex", "tapir", "okapi", "quokka", "serval", "dingo", "margay", "civet")


def _animals():
    """Secrets of ``plan.length`` animal words (a word list of one's own, not a pool chosen from the model)."""
    def space_size(plan):
        return len(WORDS) ** plan.length

    def draw_secret(plan, rng, index):
        return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=plan.length))

    def in_space(plan, secret, index):
        words = secret.split(" ")
        return len(words) == plan.length and all(w in WORDS for w in words)

    return types.SimpleNamespace(NAME="animals", SCORE_ON="secret", space_size=space_size, draw_secret=draw_secret,
                                 in_space=in_space)


@pytest.fixture
def registered():
    remove = api.register_canary_design(_animals())
    yield
    remove()


def test_a_registered_design_is_drawn_written_read_back_and_audited(registered, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.tasks.models import public_bpe_tokenizer

    man = api.new_canaries(m=40, seed=1, design="animals", length=4, attacks=["loss", "exposure"], n_references=50)
    assert all(len(c.secret.split(" ")) == 4 and set(c.secret.split(" ")) <= set(WORDS) for c in man.canaries)
    assert man.plan.space_size == 12 ** 4 and man.plan.score_on == "secret"
    man.save(tmp_path / "canaries.json")
    back = api.load_manifest(tmp_path / "canaries.json")
    assert [c.secret for c in back.canaries] == [c.secret for c in man.canaries]
    tok = public_bpe_tokenizer(256)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2))
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private")
    r = api.evaluate(model, tok, card, back)
    assert r["canary_plan"]["design"] == "animals"
    assert {e["attack"] for e in r["empirical"]} >= {"loss", "exposure"}  # exposure ranks among drawn secrets
    assert all(e["m"] == 40 for e in r["empirical"] if e["attack"] == "loss")


def test_a_manifest_of_a_design_no_one_registered_is_one_line(tmp_path):
    remove = api.register_canary_design(_animals())
    try:
        api.new_canaries(m=40, seed=1, design="animals").save(tmp_path / "canaries.json")
    finally:
        remove()
    with pytest.raises(DpauditError, match="register_canary_design") as e:
        api.load_manifest(tmp_path / "canaries.json")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("change,needle", [
    ({"NAME": "template"}, "exists already"), ({"NAME": "Animals!"}, "lowercase word"),
    ({"SCORE_ON": "tokens"}, "SCORE_ON"), ({"in_space": None}, "needs in_space"),
])
def test_a_design_that_cannot_be_registered_is_one_line(change, needle):
    d = _animals()
    for k, v in change.items():
        setattr(d, k, v)
    with pytest.raises(DpauditError, match=needle):
        api.register_canary_design(d)


def test_the_shipped_designs_draw_what_they_drew_before():
    """A committed manifest of every shipped design regenerates from its seed exactly, through the registry."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "reports"
    seen = {}
    for f in sorted(root.glob("**/checkpoint/canaries.json")):
        man = canaries.load_manifest(f)
        if man.plan.design not in seen:
            seen[man.plan.design] = canaries.regenerate(man)
    assert set(seen) == {"template", "new-token", "rare-token", "bigram"} and all(seen.values()), seen
