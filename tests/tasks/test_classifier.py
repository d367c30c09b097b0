"""Li et al.'s classifier-head baseline: an encoder with a classification head, labelled canaries,
label-based attacks, and the whole pipeline on a tiny BERT."""

import json

import numpy as np
import pytest
import torch

from dpaudit.attacks import classifier as clf_attack
from dpaudit.canaries import manifest as canaries
from dpaudit.errors import DpauditError
from dpaudit.run import config
from dpaudit.tasks import models, sentiment
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as lossmod
from dpaudit.trainers import optim

CONFIG = """
[task]
n_train = 300
n_test = 100
objective = "classifier"
[model]
name = "tiny-bert"
n_embd = 32
n_layer = 2
n_head = 2
max_len = 48
[canaries]
m = 40
repetitions = 4
labels = 2
[train]
epochs = 4
batch_size = 32
lr = 3e-3
clipping_norm = 1.0
delta = 1e-5
gradient_canaries = 500
[evaluate]
n_references = 200
attacks = ["loss", "reference", "zlib"]
[[variants]]
name = "non-private"
target_epsilon = inf
epochs = 20
[[variants]]
name = "dp"
target_epsilon = 1.0
[[variants]]
name = "lora-dp"
target_epsilon = 1.0
trainable = "lora"
"""


def _tiny_bert():
    return models.build(models.ModelSpec(name="tiny-bert", n_embd=32, n_layer=2, n_head=2, max_len=48))


def test_labelled_canaries_keep_texts_and_coins_and_round_trip(tmp_path):
    plain = canaries.generate(canaries.CanaryPlan(m=50, seed=3))
    lab = canaries.generate(canaries.CanaryPlan(m=50, seed=3, labels=2))
    assert [c.text for c in plain.canaries] == [c.text for c in lab.canaries]
    assert (plain.signs() == lab.signs()).all()
    y = lab.labels()
    assert set(y) == {0, 1} and 10 < y.sum() < 40  # uniform random labels
    lab.save(tmp_path / "c.json")
    back = canaries.load_manifest(tmp_path / "c.json")
    assert back.canaries == lab.canaries and canaries.regenerate(back)
    assert all(t == c.text and lbl == c.label for (t, lbl), c in zip(back.training_labelled(), back.inserted))
    with pytest.raises(DpauditError, match="no labels"):
        plain.labels()


def test_tampered_label_is_rejected(tmp_path):
    d = canaries.generate(canaries.CanaryPlan(m=10, labels=2)).to_dict()
    d["canaries"][0]["label"] = 5
    with pytest.raises(DpauditError, match="label in 0..1"):
        canaries.manifest_from_dict(d)
    with pytest.raises(DpauditError, match="canaries.labels"):
        canaries.CanaryPlan(labels=1)


@pytest.mark.parametrize("edit, msg", [
    (lambda s: s.replace("labels = 2\n", ""), "set canaries.labels = 2"),
    (lambda s: s.replace('name = "tiny-bert"', 'name = "tiny-gpt2"'), "does not fit task.objective"),
    (lambda s: s.replace('objective = "classifier"', 'objective = "lm"'), "does not fit task.objective"),
    (lambda s: s.replace("[train]\n", '[train]\nlora_targets = "mlp"\n'), "train.lora_targets must be one of"),
])
def test_config_rejects_mismatched_model_objective_and_canaries(edit, msg):
    import tomllib

    with pytest.raises(DpauditError, match=msg):
        config.parse(tomllib.loads(edit(CONFIG)))


def test_label_log_probs_match_a_manual_softmax():
    model, tok = _tiny_bert()
    texts = ["a fine film", "My account number is 123456.", "dull"]
    labels = [1, 0, 1]
    got = clf_attack.label_log_probs(model.eval(), tok, texts, labels, batch_size=2)
    for t, y, g in zip(texts, labels, got):
        with torch.no_grad():
            logits = model(**tok([t], return_tensors="pt")).logits[0]
        assert g == pytest.approx(float(torch.log_softmax(logits, -1)[y]), abs=1e-5)
    s = clf_attack.scores(got, got - 1.0, ["loss", "reference"])
    assert np.allclose(s["reference"], 1.0) and np.allclose(s["loss"], got)


def test_classifier_records_keep_the_label_and_the_engine_loss_reads_it():

    model, tok = _tiny_bert()
    rec = sentiment.encode_example({"sentence": "a fine film", "label": 1}, tok, "classifier", 48)
    assert rec["input_ids"][0] == tok.cls_token_id and rec["targets"][0] == 1 and set(rec["targets"][1:]) == {-100}
    data = data_seam.collate([rec], tok.pad_token_id, 48)
    ids, mask, tgt = data.tensors
    loss = lossmod.per_sample_loss(lossmod.forward(model.eval(), ids, mask), tgt)
    manual = -clf_attack.label_log_probs(model, tok, ["a fine film"], [1])[0]
    assert float(loss[0]) == pytest.approx(manual, abs=1e-5)


@pytest.fixture(scope="module")
def clf_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    (d / "cfg.toml").write_text(CONFIG)
    from dpaudit.cli import main

    assert main(["run", str(d / "cfg.toml"), "--out", str(d / "out"), "--quiet"]) == 0
    return d / "out"


def test_pipeline_on_a_classifier_leaks_without_noise_and_not_with_it(clf_run):
    r = json.loads((clf_run / "report.json").read_text())["variants"]
    nonpriv, dp = r["non-private"], r["dp"]
    assert nonpriv["attacks"]["loss"]["auc"] > 0.8, nonpriv["attacks"]["loss"]["auc"]  # mislabelled canaries are memorised
    assert nonpriv["empirical_best"]["epsilon_lb"] > 1.0
    assert dp["verdict"]["status"] == "consistent"
    assert dp["empirical_best"]["epsilon_lb"] <= dp["claim"]["epsilon"]
    assert "zlib skipped" in " ".join(dp["notes"]) and "zlib" not in dp["attacks"]
    assert "Note: zlib skipped" in (clf_run / "dp" / "report" / "REPORT.md").read_text()


def test_reported_accuracy_is_recomputed_from_the_checkpoint(clf_run):
    from dpaudit import checkpoint

    ck = checkpoint.load(clf_run / "dp" / "checkpoint")
    model, tok = ck.load_model()
    assert models.is_classifier(model)
    data = sentiment.load("rotten-tomatoes", 300, 100, 0)
    r = json.loads((clf_run / "dp" / "report" / "report.json").read_text())
    assert sentiment.accuracy(model, tok, data.test, max_len=48) == pytest.approx(r["metrics"]["accuracy"])
    assert r["metrics"]["accuracy"] > 0.55  # the classifier learns the task under DP


def test_only_lm_attacks_on_a_classifier_is_a_clear_error(clf_run):
    from dpaudit.evaluation.options import EvalOptions
    from dpaudit.evaluation.steps import evaluate

    with pytest.raises(DpauditError, match="need a causal LM"):
        evaluate(clf_run / "dp" / "checkpoint", EvalOptions(attacks=("zlib", "exposure"), off_plan=True))


def test_lora_classifier_checkpoint_reloads_with_its_trained_head(clf_run):
    from dpaudit import checkpoint

    ck = checkpoint.load(clf_run / "lora-dp" / "checkpoint")
    model, tok = ck.load_model()
    base, _ = models.load_dir(clf_run / "lora-dp" / "checkpoint" / "base_model")
    assert models.is_classifier(model)
    head, head0 = model.classifier.weight, base.classifier.weight
    assert not torch.allclose(head, head0)  # the head was trained and saved with the adapters
    r = json.loads((clf_run / "lora-dp" / "report" / "report.json").read_text())
    data = sentiment.load("rotten-tomatoes", 300, 100, 0)
    assert sentiment.accuracy(model, tok, data.test, max_len=48) == pytest.approx(r["metrics"]["accuracy"])


def test_lora_classifier_trains_head_and_adapters(tmp_path):
    from dpaudit.trainers import trainable

    model, _ = _tiny_bert()
    peft_model, base = trainable.apply(model, "lora", lora_r=4, lora_alpha=8)
    names = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in names) and any("classifier" in n for n in names)
    assert not any("word_embeddings" in n for n in names)
    assert models.is_classifier(peft_model) and models.is_classifier(base)


def test_head_only_trains_just_the_classifier_and_needs_one():
    from dpaudit.trainers import trainable

    model, _ = _tiny_bert()
    model, base = trainable.apply(model, "head")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert base is None and names and all(n.startswith("classifier.") for n in names)
    lm = models.build(models.ModelSpec(vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=32))[0]
    with pytest.raises(DpauditError, match="needs a classifier model"):
        trainable.apply(lm, "head")


def test_mean_pooling_head_reads_the_masked_mean_and_ignores_padding(tmp_path):
    model, tok = models.build(models.ModelSpec(name="tiny-bert", n_embd=32, n_layer=2, n_head=2, max_len=48,
                                               pooling="mean"))
    model.eval()
    assert type(model).__name__ == "MeanPoolBertForSequenceClassification" and model.bert.pooler is None
    texts = ["a fine film", "dull and long , with nothing to say about anything at all"]
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        batched = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        alone = model(**{k: v for k, v in tok(texts[:1], return_tensors="pt").items() if k != "token_type_ids"}).logits
        h = model.bert(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"][1].bool()
    manual = model.classifier(h[1][m].mean(0))
    assert torch.allclose(batched[1], manual, atol=1e-5)
    assert torch.allclose(batched[0], alone[0], atol=1e-5)  # the padding of the short text changes nothing
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    back, _ = models.load_dir(tmp_path / "m")
    assert type(back).__name__ == "MeanPoolBertForSequenceClassification" and models.is_classifier(back)
    with torch.no_grad():
        again = back(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
    assert torch.allclose(again, batched, atol=1e-6)


def test_mean_pooling_is_refused_for_a_causal_lm():
    with pytest.raises(DpauditError, match="model.pooling applies to minilm-l6, tiny-bert, local only, not tiny-gpt2"):
        models.ModelSpec(name="tiny-gpt2", pooling="mean")
    with pytest.raises(DpauditError, match="model.pooling must be one of"):
        models.ModelSpec(name="tiny-bert", pooling="max")


def test_size_fields_of_a_pretrained_model_are_refused_not_ignored():
    """SmolLM2's and MiniLM's sizes are their checkpoints'; a [model] n_layer for them would be silently
    ignored, and run.json would record sizes the model never had."""
    with pytest.raises(DpauditError, match=r"model.n_layer applies to tiny-gpt2, tiny-bert only, not smollm2-135m; remove it"):
        models.ModelSpec(name="smollm2-135m", n_layer=2)
    with pytest.raises(DpauditError, match="model.vocab_size applies to tiny-gpt2 only"):
        config.parse({"model": {"name": "minilm-l6", "vocab_size": 512}})
    with pytest.raises(DpauditError, match="model.init_seed applies to"):
        models.ModelSpec(name="smollm2-135m", init_seed=3)
    assert models.ModelSpec(name="minilm-l6", init_seed=3).init_seed == 3  # seeds the new head
    assert models.ModelSpec(name="smollm2-135m", max_len=128).to_dict() == {"name": "smollm2-135m", "max_len": 128}
    assert set(models.ModelSpec(name="minilm-l6").to_dict()) == {"name", "max_len", "init_seed", "pooling"}
    tiny = models.ModelSpec(name="tiny-gpt2", n_layer=2)
    assert models.ModelSpec(**tiny.to_dict()) == tiny and "pooling" not in tiny.to_dict()
    # run.json written before this check recorded every field at its default: it still loads
    old = {"name": "smollm2-135m", "vocab_size": 2048, "n_embd": 128, "n_layer": 4, "n_head": 4, "max_len": 128,
           "init_seed": 0, "pretrain_steps": 0, "pooling": "cls"}
    assert models.ModelSpec(**old).to_dict() == {"name": "smollm2-135m", "max_len": 128}


@pytest.mark.parametrize("which", ["full", "lora"])
def test_head_lr_moves_the_head_at_its_own_rate(which):
    """Adam's first step moves a coordinate with a clear gradient by its group's lr (m / sqrt(v) = ±1)."""
    from dpaudit.trainers import engine, trainable

    model, tok = _tiny_bert()
    model, _ = trainable.apply(model, which, lora_r=4, lora_alpha=8)
    cfg = engine.EngineConfig(lr=1e-4, head_lr=1e-2)
    params, opt = optim.base(model, cfg.lr, cfg.weight_decay, cfg.head_lr)
    assert len(params) == sum(len(g["params"]) for g in opt.param_groups)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    records = [sentiment.encode_labelled(t, i % 2, tok, 32) for i, t in enumerate(["a fine film", "the worst", "great fun"])]
    ids, mask, tgt = data_seam.collate(records, tok.pad_token_id, 32).tensors
    lossmod.batch_loss(model, ids, mask, tgt).mean().backward()
    opt.step()
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters() if p.requires_grad}
    head = [v for n, v in moved.items() if optim.is_head(n)]
    body = [v for n, v in moved.items() if not optim.is_head(n) and v > 0]
    assert head and body
    # (a coordinate whose gradient is near Adam's eps moves less than its lr, none moves more)
    assert max(head) == pytest.approx(1e-2, rel=1e-3) and max(body) == pytest.approx(1e-4, rel=1e-3)


def test_head_lr_needs_a_classifier_head(tiny_model_factory):
    from dpaudit.trainers import engine

    model, _ = tiny_model_factory()
    with pytest.raises(DpauditError, match="train.head_lr is set but the model has no trainable classifier head"):
        optim.base(model, 1e-3, head_lr=1e-2)
    with pytest.raises(DpauditError, match="train.head_lr must be > 0"):
        engine.EngineConfig(head_lr=0.0)


def test_pretrained_tiny_gpt2_cache_key_does_not_change_with_classifier_only_fields():
    """The key of the table-to-text configs' pre-trained base (computed before model.pooling existed)."""
    spec = models.ModelSpec(name="tiny-gpt2", vocab_size=2048, n_embd=128, n_layer=4, n_head=4, max_len=128,
                            pretrain_steps=600)
    assert models.pretrained_key(spec) == "97aee1f21369"
    assert models.pretrained_key(spec) != models.pretrained_key(models.ModelSpec(name="tiny-gpt2", pretrain_steps=600))
