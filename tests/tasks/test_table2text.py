"""E2E-style table-to-text: seeded generation, local files, loss mask, metrics, and a tiny run end to end."""

import json

import pytest
import torch

from dpaudit.errors import DpauditError
from dpaudit.tasks import table2text


def test_generation_is_seeded_and_varied():
    a, b = table2text.load(n_train=50, n_test=10, seed=0), table2text.load(n_train=50, n_test=10, seed=0)
    assert a.fingerprint() == b.fingerprint()
    assert table2text.load(n_train=50, n_test=10, seed=1).fingerprint() != a.fingerprint()
    assert len(a.train) == 50 * table2text.N_REFS and len(a.test) == 10
    assert not {e["mr"] for e in a.test} & {e["mr"] for e in a.train}  # test MRs are unseen
    assert all(e["mr"].startswith("name[") and "eatType[" in e["mr"] for e in a.test)
    assert len({t["text"] for t in a.train}) > 0.9 * len(a.train)  # enough variety to measure memorisation


def test_local_files_group_references(tmp_path):
    rows = [{"mr": f"name[X{i // 2}], eatType[pub]", "ref": f"X{i // 2} is a pub {i}."} for i in range(40)]
    (tmp_path / "e2e.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    d = table2text.load(str(tmp_path / "e2e.jsonl"), test_fraction=0.25)
    assert len(d.test) == 5 and all(len(e["refs"]) == 2 for e in d.test)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"mr": "x"}))
    with pytest.raises(DpauditError, match="'ref'"):
        table2text.load(str(tmp_path / "bad.jsonl"))


def test_loss_covers_the_text_only(tiny_model_factory):
    _, tok = tiny_model_factory()
    ex = {"mr": "name[The Blue Eagle], eatType[pub]", "text": "The Blue Eagle is a pub."}
    enc = table2text.encode_example(ex, tok, "lm", 64)
    n_prompt = len(table2text.prompt_ids(ex["mr"], tok, 64))
    assert all(t == -100 for t in enc["targets"][:n_prompt])
    assert enc["targets"][n_prompt:] == enc["input_ids"][n_prompt:]
    assert enc["input_ids"][-1] == tok.eos_token_id


def test_metrics_by_hand():
    refs = [["the cat sat on the mat .", "a cat sat on a mat ."], ["there is a pub near the river .", "a riverside pub ."]]
    perfect = table2text.score([r[0] for r in refs], refs)
    assert perfect["bleu"] == pytest.approx(100.0) and perfect["rougeL"] == pytest.approx(100.0)
    bad = table2text.score(["completely unrelated words here", "nothing"], refs)
    assert bad["bleu"] < 5 and bad["rougeL"] < 20
    assert perfect["nist"] > bad["nist"] >= 0 and perfect["cider"] > bad["cider"] >= 0


def test_tiny_run_end_to_end(tmp_path):
    from dpaudit.cli import main

    cfg = tmp_path / "t2t.toml"
    cfg.write_text("""
[task]
name = "table2text"
n_train = 120
n_test = 8
[model]
vocab_size = 512
n_embd = 32
n_layer = 2
n_head = 2
max_len = 64
[canaries]
m = 20
[train]
epochs = 2
batch_size = 32
lr = 3e-3
delta = 1e-5
[evaluate]
n_references = 50
enumerate_limit = 0  # sampled references: the whole-space trie is tested in test_exposure_trie.py
attacks = ["loss", "exposure"]
[[variants]]
name = "np"
target_epsilon = inf
""")
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    r = json.loads((tmp_path / "out" / "np" / "report" / "report.json").read_text())
    assert r["metrics"]["task"] == "table2text" and 0 <= r["metrics"]["bleu"] <= 100
    assert "beam" in r["metrics"]["decoding"] and len(r["metrics"]["examples"]) == 3


def test_decoding_runs_to_the_context_not_a_fixed_cap():
    """Generation stops at EOS or when prompt + text fill max_len (Li et al.'s max_seq_len), not at a fixed
    number of new tokens: a 48-token cap cut a third of the tiny-GPT-2 E2E references."""
    from dpaudit.tasks.models import ModelSpec, build

    model, tok = build(ModelSpec(name="tiny-gpt2", vocab_size=512, n_embd=32, n_layer=2, n_head=2, max_len=96))
    model.generation_config.eos_token_id = None
    with torch.no_grad():  # never emit EOS, so only the length budget stops decoding
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.lm_head.out_features))
        model.lm_head.bias[tok.eos_token_id] = -1e9
    lengths, generate = [], model.generate

    def spy(**kw):  # the number of new tokens each call produced
        out = generate(**kw)
        lengths.append(out.size(1) - kw["input_ids"].size(1))
        return out

    model.generate = spy
    mr = "name[The Blue Eagle], eatType[pub]"
    n_prompt = len(table2text.prompt_ids(mr, tok, 96))
    assert 96 - n_prompt > 48 + 8
    table2text.generate_texts(model, tok, [mr], num_beams=2, max_len=96)
    table2text.generate_texts(model, tok, [mr], num_beams=2, max_len=96, max_new_tokens=5)
    assert lengths == [96 - n_prompt, 5]
