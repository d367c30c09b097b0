"""The final-weights canary design in the manifest (init, random prefix, train_on): fixed before training,
regenerated from the seed, refused when edited, and applied by the trainer and the planting helpers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dpaudit import api
from dpaudit.canaries import new_tokens
from dpaudit.canaries.manifest import CanaryPlan, generate, manifest_from_dict, regenerate
from dpaudit.canaries.plan import default_attacks
from dpaudit.errors import DpauditError

PLAN = CanaryPlan(m=20, design="new-token", length=1, prefix="", suffix="", init="zero", random_prefix=12,
                  train_on="secret", seed=3)


def test_each_canary_gets_its_own_random_prefix_regenerated_from_the_seed():
    man = generate(PLAN)
    prefixes = [c.text[: -len(c.secret)] for c in man.canaries]
    assert len(set(prefixes)) == 20 and all(len(p) == 13 and p.endswith(" ") for p in prefixes)
    back = manifest_from_dict(json.loads(json.dumps(man.to_dict())))
    assert back.plan == man.plan and regenerate(back)
    assert back.plan.init == "zero" and back.plan.train_on == "secret" and back.plan.random_prefix == 12


def test_an_edited_prefix_or_design_field_is_refused_or_detected():
    d = generate(PLAN).to_dict()
    d["canaries"][0]["text"] = "x" + d["canaries"][0]["text"]
    with pytest.raises(DpauditError, match="not the template"):
        manifest_from_dict(d)
    d = generate(PLAN).to_dict()
    d["design"]["random_prefix"] = 11  # the texts no longer follow: refused
    with pytest.raises(DpauditError, match="not the template"):
        manifest_from_dict(d)


@pytest.mark.parametrize("change,match", [
    (dict(design="template", length=6), "needs design"),
    (dict(init="ones"), "canaries.init"),
    (dict(train_on="prefix"), "canaries.train_on"),
    (dict(random_prefix=-1), "random_prefix"),
    (dict(random_prefix=True), "random_prefix"),
])
def test_bad_design_fields_are_refused_in_one_line(change, match):
    with pytest.raises(DpauditError, match=match):
        dataclasses.replace(PLAN, **change)


def test_the_default_plan_adds_the_final_weights_score_only_where_canaries_own_zero_rows():
    assert "final_weights" in default_attacks(PLAN)
    assert "final_weights" not in default_attacks(dataclasses.replace(PLAN, init="seeded"))
    assert "final_weights" not in default_attacks(CanaryPlan(m=20))
    man = api.new_canaries(m=20, seed=1, template="{secret}", design="new-token", length=1, init="zero")
    assert man.plan.evaluation["attacks"][-1] == "final_weights"


def test_the_default_plan_names_exposure_only_where_the_design_has_a_space_to_rank_in():
    assert "exposure" not in default_attacks(PLAN)  # new tokens: each secret is its own tokens
    assert "exposure" in default_attacks(CanaryPlan(m=20))
    assert "exposure" in default_attacks(None)


def _tiny():
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks.models import public_bpe_tokenizer

    tok = public_bpe_tokenizer(256)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)
    return GPT2LMHeadModel(cfg), tok


@pytest.mark.parametrize("init", ["zero", "seeded"])
def test_zero_init_starts_every_new_row_at_zero(init):
    model, tok = _tiny()
    man = generate(dataclasses.replace(PLAN, init=init, train_on="record" if init == "seeded" else "secret"))
    n = new_tokens.add(model, tok, man)
    rows = model.get_output_embeddings().weight[-n:]
    assert n == 20 and bool((rows == 0).all()) == (init == "zero")


def test_canary_labels_keep_only_the_new_token():
    model, tok = _tiny()
    man = generate(PLAN)
    new_tokens.add(model, tok, man)
    c = man.canaries[0]
    ids = tok(c.text).input_ids
    labels = api.canary_labels(ids, tok, man)
    kept = [(i, y) for i, y in zip(ids, labels) if y != -100]
    assert kept == [(tok.convert_tokens_to_ids(c.secret),) * 2]
    with pytest.raises(DpauditError, match="none of its new tokens"):
        api.canary_labels(tok("no canary here").input_ids, tok, man)


def test_the_trainer_reads_a_canary_records_loss_on_its_token_only():
    from dpaudit.trainers import dp_adam

    model, tok = _tiny()
    man = generate(PLAN)
    new_tokens.add(model, tok, man)

    class Data:
        train = []
    recs = dp_adam.build_records(Data, man, tok, "lm", 64, 0)
    assert len(recs) == len(man.inserted)
    for r in recs:
        scored = [t for t in r["targets"] if t != -100]
        assert len(scored) == 1 and tok.convert_ids_to_tokens(scored[0]).startswith("<|canary")


def test_evaluating_new_token_canaries_with_the_base_tokenizer_is_refused():
    """The guard for new-token checkpoints: scored with a tokenizer that lacks the canaries' tokens, every canary
    would be scored on other tokens; refused in one line naming the fix."""
    from dpaudit.claim.card import Claim, PrivacyCard

    model, tok = _tiny()
    man = generate(PLAN)
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private")
    with pytest.raises(DpauditError, match="tokenizer lacks their tokens"):
        api.evaluate(model, tok, card, man, attacks=["loss"], off_plan=True)


def test_the_trainers_lm_collator_drops_canary_labels_and_the_seq2seq_one_keeps_them():
    """docs/pitfalls.md, 7: what transformers' collators do with the labels of ``canary_labels``."""
    from transformers import DataCollatorForLanguageModeling, DataCollatorForSeq2Seq

    model, tok = _tiny()
    man = generate(PLAN)
    new_tokens.add(model, tok, man)
    tok.pad_token = tok.eos_token
    ids = tok(man.canaries[0].text).input_ids
    labels = api.canary_labels(ids, tok, man)
    row = {"input_ids": ids, "labels": labels}
    assert DataCollatorForLanguageModeling(tok, mlm=False)([row])["labels"][0].tolist() == ids
    assert DataCollatorForSeq2Seq(tok)([row])["labels"][0].tolist() == labels
