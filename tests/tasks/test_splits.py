"""task.validation: hyperparameters tuned on a split held out from training, never on the test split."""

import json

import pytest

from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.run.config import TaskConfig
from dpaudit.tasks import sentiment, table2text, userlm


def test_sentiment_validation_is_held_out_from_training():
    full = sentiment.load(n_train=None, n_test=None)
    plain = sentiment.load(n_train=500)
    val = sentiment.load(n_train=500, validation=200)
    assert val.test == full.train[-200:]  # the last 200 training examples, not the test split
    assert val.train == plain.train  # tuning and final runs train on the same examples
    key = {(e["sentence"], e["label"]) for e in val.train}
    assert not key & {(e["sentence"], e["label"]) for e in val.test}
    assert val.fingerprint() != plain.fingerprint()
    assert len(sentiment.load(validation=200).train) == len(full.train) - 200


def test_table2text_and_userlm_hold_out_whole_units():
    plain = table2text.load(n_train=40, n_test=10)
    val = table2text.load(n_train=40, n_test=10, validation=12)
    assert len(val.test) == 12 and val.train == plain.train
    assert not {e["mr"] for e in val.train} & {e["mr"] for e in val.test}
    assert not {e["mr"] for e in val.test} & {e["mr"] for e in plain.test}
    u_plain = userlm.load()
    u_val = userlm.load(validation=5)
    held = {r["user"] for r in u_val.test}
    assert len(held) == 5
    assert not held & {r["user"] for r in u_val.train}
    assert not held & {r["user"] for r in u_plain.test}  # the test users stay unseen


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_validation_is_a_config_error(bad):
    with pytest.raises(DpauditError, match="task.validation"):
        TaskConfig(validation=bad)


def test_validation_larger_than_training_split(tmp_path):
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"sentence": f"s{i}", "label": i % 2}) + "\n"
                                              for i in range(20)))
    with pytest.raises(DpauditError, match="hold out all 15 training examples"):
        sentiment.load(str(tmp_path / "d.jsonl"), test_fraction=0.25, validation=15)


def test_run_with_validation_reports_validation_numbers(tmp_path):
    cfg = tmp_path / "val.toml"
    cfg.write_text("""
[task]
name = "sentiment"
n_train = 60
validation = 30
objective = "lm"
[model]
name = "tiny-gpt2"
vocab_size = 512
n_embd = 32
n_layer = 1
n_head = 2
max_len = 32
[canaries]
m = 10
[train]
epochs = 1
batch_size = 16
[evaluate]
n_references = 20
attacks = ["loss"]
[[variants]]
name = "np"
target_epsilon = inf
""")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    r = json.loads((out / "np" / "report" / "report.json").read_text())
    assert r["metrics"]["split"] == "validation" and r["metrics"]["n_test"] == 30
    assert "validation accuracy" in (out / "REPORT.md").read_text()
    assert "the test split was not used" in (out / "np" / "report" / "REPORT.md").read_text()
    # evaluate re-loads the same validation split from run.json (the fingerprint check would fail otherwise)
    assert main(["evaluate", str(out / "np" / "checkpoint"), "--out", str(tmp_path / "ev"), "--attacks", "loss", "--off-plan",
                 "--quiet"]) == 0
    assert json.loads((tmp_path / "ev" / "report.json").read_text())["metrics"]["accuracy"] == r["metrics"]["accuracy"]
