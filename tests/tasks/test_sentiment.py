"""The sentiment task: the bundled Rotten Tomatoes split and local SST-2-style files."""

import json

import pytest

from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment
from dpaudit.tasks.batching import CHOICE_BASE
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import loss as lossmod


def test_rotten_tomatoes_split_is_fixed():
    a = sentiment.load(seed=0)
    b = sentiment.load(seed=0)
    assert len(a.train) == 11527 and len(a.test) == 1281
    assert a.fingerprint() == b.fingerprint()
    assert sentiment.load(seed=1).fingerprint() != a.fingerprint()
    assert {e["label"] for e in a.train} == {0, 1}


def test_local_jsonl_csv_and_disk(tmp_path):
    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(20)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    d = sentiment.load(str(tmp_path / "d.jsonl"), test_fraction=0.25)
    assert len(d.train) == 15 and len(d.test) == 5
    folder = tmp_path / "sst2"
    folder.mkdir()
    (folder / "train.csv").write_text("sentence,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(8)))
    (folder / "validation.csv").write_text("sentence,label\nv,1\n")
    d = sentiment.load(str(folder))
    assert len(d.train) == 8 and d.test == [{"sentence": "v", "label": 1}]
    import datasets

    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:12]),
                               "validation": datasets.Dataset.from_list(rows[12:])})
    dd.save_to_disk(str(tmp_path / "hf"))
    d = sentiment.load(str(tmp_path / "hf"))
    assert len(d.train) == 12 and len(d.test) == 8


def test_empty_and_bad_data(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DpauditError, match="empty"):
        sentiment.load(str(tmp_path / "empty.jsonl"))
    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\n')
    with pytest.raises(DpauditError, match="label"):
        sentiment.load(str(tmp_path / "bad.jsonl"))
    with pytest.raises(DpauditError, match="not found"):
        sentiment.load(str(tmp_path / "nope.csv"))


def test_encoding_objectives(tiny_model_factory):
    _, tok = tiny_model_factory()
    ex = {"sentence": "a lovely film", "label": 1}
    lm = sentiment.encode_example(ex, tok, "lm", 32)
    lw = sentiment.encode_example(ex, tok, "label_words", 32)
    assert lm["input_ids"][:-1] == lw["input_ids"]
    assert sum(t != -100 for t in lw["targets"]) == 1
    assert lw["targets"][-1] == CHOICE_BASE - 1  # choice 1 of the label words
    assert lw["choices"] == sentiment.label_token_ids(tok)


def test_label_word_loss_is_a_softmax_over_the_label_words(tiny_model_factory):
    """Li et al.'s prompt-based loss: -log of the correct label word's probability among the label words
    (not among the vocabulary), computed by the engine from the record alone; canary text records in the
    same batch keep their full-vocabulary LM loss."""
    import torch


    model, tok = tiny_model_factory()
    exs = [{"sentence": "a lovely film", "label": 1}, {"sentence": "dull , long and empty", "label": 0}]
    recs = [sentiment.encode_example(e, tok, "label_words", 32) for e in exs]
    recs.append(sentiment.encode_text("My account number is 123456.", tok, 32))
    choices = lossmod.run_choices(recs)
    assert choices.tolist() == sentiment.label_token_ids(tok)
    ids, mask, tgt = data_seam.collate(recs, tok.pad_token_id, 32).tensors
    with torch.no_grad():
        logits = lossmod.forward(model.eval(), ids, mask)
        got = lossmod.per_sample_loss(logits, tgt, choices)
        for i, e in enumerate(exs):
            last = len(recs[i]["input_ids"]) - 2  # the logits that predict the label word
            pair = logits[i, last, choices]
            assert abs(float(got[i]) - float(-torch.log_softmax(pair, -1)[e["label"]])) < 1e-5
        lm = lossmod.per_sample_loss(logits[2:], data_seam.collate(recs[2:], tok.pad_token_id, 32).tensors[2])
        assert abs(float(got[2]) - float(lm[0])) < 1e-6
        full_vocab = -torch.log_softmax(logits[0, len(recs[0]["input_ids"]) - 2], -1)[choices[1]]
        assert float(got[0]) < float(full_vocab) - 1.0  # the restricted loss is not the vocabulary's
    with pytest.raises(DpauditError, match="choices"):
        lossmod.run_choices([{**recs[0], "choices": None}])
    with pytest.raises(DpauditError, match="different choice lists"):
        lossmod.run_choices([recs[0], {**recs[1], "choices": recs[1]["choices"][::-1]}])


def test_public_pretraining_is_cached_and_helps(monkeypatch, tmp_path):
    """tiny-gpt2 with pretrain_steps learns from public BBC text (lower loss on held-out news) and is cached."""
    import torch

    from dpaudit.tasks import assets, models
    from dpaudit.trainers import pretrain

    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path))
    spec = dict(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=1, n_head=2, max_len=32)
    fresh, tok = models.build(models.ModelSpec(**spec))
    with pytest.raises(DpauditError, match="not cached"):  # the task layer never trains (tasks do not import trainers)
        models.build(models.ModelSpec(**spec, pretrain_steps=60))
    pre, _ = pretrain.build(models.ModelSpec(**spec, pretrain_steps=60))
    assert list((tmp_path / "pretrained").iterdir())
    again, _ = models.build(models.ModelSpec(**spec, pretrain_steps=60))  # the cache, read by the task layer
    assert all(torch.equal(a, b) for a, b in zip(pre.state_dict().values(), again.state_dict().values()))
    text = assets.bbc_texts()[-1][:400]
    rec = sentiment.encode_text(text, tok, 32)
    data = data_seam.collate([rec], tok.pad_token_id, 32)
    ids, mask, tgt = data.tensors
    with torch.no_grad():
        l_fresh = float(lossmod.per_sample_loss(lossmod.forward(fresh, ids, mask), tgt))
        l_pre = float(lossmod.per_sample_loss(lossmod.forward(pre, ids, mask), tgt))
    assert l_pre < l_fresh - 0.3
    with pytest.raises(DpauditError, match="pretrain_steps"):
        models.ModelSpec(name="smollm2-135m", pretrain_steps=5)


def test_user_level_training_refuses_label_word_records(tiny_model_factory):
    """The user-level loop has no closed-choice scoring: label-word records are a one-line error there,
    not a cross-entropy on a negative target."""
    from dpaudit.trainers import engine

    model, tok = tiny_model_factory()
    rec = sentiment.encode_example({"sentence": "a fine film", "label": 1}, tok, "label_words", 32)
    with pytest.raises(DpauditError, match="closed-choice"):
        engine.train_users(model, {"u0": [rec]}, engine.EngineConfig(), tok.pad_token_id, 32)


def test_constant_predictor_accuracy_is_the_majority_label_share():
    from dpaudit.tasks.sentiment import majority_accuracy

    assert majority_accuracy([{"label": 1}, {"label": 0}, {"label": 1}, {"label": 1}]) == 0.75
    assert majority_accuracy([]) == 0.0
