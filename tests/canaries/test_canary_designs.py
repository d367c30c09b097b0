"""Canary designs (dpaudit/canaries/manifest.py, canary_pools.py, canary_tokens.py): manifests that regenerate and refuse
edits, pools chosen as documented, new tokens that extend a model identically, loss scored on the secret only,
and on tiny models: a non-private model betrays new-token canaries, strong noise hides them."""

import json

import numpy as np
import pytest
import torch

from dpaudit.attacks.scoring import encode
from dpaudit.audit import one_run
from dpaudit.canaries import manifest as canaries
from dpaudit.canaries import new_tokens as canary_tokens
from dpaudit.canaries import pools as canary_pools
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from tests.settings import TINY_MODEL

PLAN = {"attacks": ["loss", "zlib", "min_k", "reference", "exposure"], "rule": "bonferroni", "confidence": 0.95,
        "n_references": 100}


def _plan(design, **kw):
    return canaries.CanaryPlan(m=kw.pop("m", 30), design=design, length=kw.pop("length", 3), evaluation=dict(PLAN), **kw)


@pytest.fixture(scope="module")
def tiny(tiny_model_factory):
    return tiny_model_factory()


@pytest.mark.parametrize("design", ["rare-token", "bigram"])
def test_pool_manifests_regenerate_from_the_recorded_pool_and_refuse_edits(design, tiny):
    model, tok = tiny
    plan = canary_pools.resolve(_plan(design, pool=32), tok, model)
    man = canaries.generate(plan)
    assert len(plan.symbols) == 32 and plan.pool_source
    assert man.plan.evaluation["score_on"] == "secret"  # the scoring rule is part of the plan fixed now
    d = json.loads(json.dumps(man.to_dict()))
    back = canaries.manifest_from_dict(d)
    assert back.plan == man.plan and canaries.regenerate(back)  # no model needed to regenerate
    # every secret is pool words, and each tokenises to exactly its own tokens inside the canary text
    ids = {w: tok(" " + w, add_special_tokens=False).input_ids for w in plan.symbols}
    assert all(len(v) == 1 for v in ids.values())
    head = tok(plan.prefix.rstrip(" "), add_special_tokens=False).input_ids
    for c in man.canaries:
        want = head + [ids[w][0] for w in c.secret.split(" ")] + tok(plan.suffix, add_special_tokens=False).input_ids
        assert tok(c.text, add_special_tokens=False).input_ids == want
    d["canaries"][0]["secret"] = d["canaries"][0]["text"] = "x"
    with pytest.raises(DpauditError, match="not in the declared space"):
        canaries.manifest_from_dict(d)


def test_bigram_secrets_never_hold_a_pair_seen_in_the_public_text(tiny):
    _, tok = tiny
    w = [x for _, x in canary_pools.word_tokens(tok, "My account number is ", ".")[-4:]]  # the last in id order
    texts = [" ".join(w * 3)]  # pairs (w0, w1), (w1, w2), (w2, w3), (w3, w0) occur; (w1, w0) does not
    plan = canary_pools.resolve(_plan("bigram", pool=8, m=4, length=4), tok, texts=texts)
    pos = {x: i for i, x in enumerate(plan.symbols)}
    assert set(w) <= set(plan.symbols)  # the most frequent words
    assert (pos[w[0]], pos[w[1]]) in plan.excluded_pairs and (pos[w[1]], pos[w[0]]) not in plan.excluded_pairs
    assert len(plan.excluded_pairs) == 4
    man = canaries.generate(plan)
    for s in [c.secret for c in man.canaries] + man.reference_secrets(200):
        w = s.split(" ")
        assert not any((pos[a], pos[b]) in plan.excluded_pairs for a, b in zip(w, w[1:]))
    # the space counts the sequences avoiding the excluded pairs exactly
    import itertools

    n, ex = len(plan.symbols), set(plan.excluded_pairs)
    assert plan.space_size == sum(1 for t in itertools.product(range(n), repeat=4)
                                  if not any(p in ex for p in zip(t, t[1:])))


def test_rare_token_pool_is_the_base_models_least_likely_words(tiny):
    model, tok = tiny
    texts = ["the cat sat on the mat", "a dog ran in the park"]
    model.train()  # a base model object handed over in training mode goes back in it (dpaudit.module_state)
    plan = canary_pools.resolve(_plan("rare-token", pool=10), tok, model, texts=texts)
    assert model.training
    model.eval()
    words = canary_pools.word_tokens(tok, plan.prefix, plan.suffix)
    # the mean next-token probability, computed here by a plain loop over the texts
    total, count = torch.zeros(len(tok), dtype=torch.float64), 0
    with torch.no_grad():
        for t in texts:
            ids = [tok.eos_token_id] + tok(t, add_special_tokens=False).input_ids + [tok.eos_token_id]
            p = model(input_ids=torch.tensor([ids])).logits[0].double().softmax(-1)
            total += p.sum(0)
            count += len(ids)
    mean = total / count
    want = sorted(words, key=lambda x: (mean[x[0]].item(), x[0]))[:10]
    assert plan.symbols == tuple(w for _, w in want)


def test_new_tokens_extend_a_model_identically_and_only_once(tiny_model_factory):
    man = canaries.generate(_plan("new-token", m=6, length=2))
    (m1, t1), (m2, t2) = tiny_model_factory(), tiny_model_factory()
    assert canary_tokens.add(m1, t1, man) == 12 and canary_tokens.add(m2, t2, man) == 12
    w1, w2 = m1.get_input_embeddings().weight, m2.get_input_embeddings().weight
    assert w1.shape[0] == len(t1) == 512 + 12 and torch.equal(w1, w2)  # same manifest, same rows
    assert len(set(map(tuple, w1[512:].tolist()))) == 12  # distinguishable rows
    ids = t1(man.canaries[0].text, add_special_tokens=False).input_ids
    assert ids[-3:-1] == t1.convert_tokens_to_ids(man.new_tokens()[:2])  # the secret is exactly its own tokens
    assert canary_tokens.add(m1, t1, man) == 0  # an extended checkpoint is left as it is
    other = canaries.generate(_plan("new-token", m=8, length=2))
    with pytest.raises(DpauditError, match="already holds"):
        canary_tokens.add(m1, t1, other)


def test_secret_spans_score_the_secret_tokens_only(tiny_model_factory):
    man = canaries.generate(_plan("new-token", m=4, length=2))
    model, tok = tiny_model_factory()
    canary_tokens.add(model, tok, man)
    text = man.canaries[1].text
    a = len(man.plan.prefix)
    for framing in ("bos_eos", "tokenizer"):
        seqs, masks = encode(tok, [text], None, None, framing, spans=[(a, a + len(man.canaries[1].secret))])
        scored = [t for t, s in zip(seqs[0], masks[0]) if s]
        assert scored == tok.convert_tokens_to_ids(man.new_tokens()[2:4])


def test_token_designs_refuse_what_does_not_fit(tmp_path, capsys):
    with pytest.raises(DpauditError, match="classifier"):
        canaries.CanaryPlan(m=10, design="bigram", labels=2)
    with pytest.raises(DpauditError, match="pool chosen"):
        canaries.generate(canaries.CanaryPlan(m=10, design="rare-token"))
    with pytest.raises(DpauditError, match="design must be one of"):
        canaries.CanaryPlan(m=10, design="emoji")
    out = tmp_path / "c.json"
    assert main(["canaries", "new", "--m", "10", "--design", "rare-token", "--out", str(out)]) == 2
    assert main(["canaries", "new", "--m", "10", "--out", str(out), "--records", str(out)]) == 2
    assert "same file" in capsys.readouterr().err and not out.exists()
    cfg = tmp_path / "cfg.toml"
    cfg.write_text('[canaries]\ndesign = "bigram"\nsymbols = ["a", "b"]\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "canaries.symbols" in capsys.readouterr().err


def test_one_run_bound_on_secret_scores_is_valid_when_nothing_leaks():
    """The new scores feed the unchanged one-run analysis: scores that carry no membership signal (a mechanism
    with epsilon 0) give a positive bound at 95% in at most the binomial tail of 5% of audits."""
    rng = np.random.default_rng(0)
    m, k = 200, 25
    positive = 0
    for _ in range(400):
        s = rng.choice([-1, 1], size=m)
        scores = rng.normal(size=m)  # what a secret-only loss gives when training saw nothing of the canaries
        order = np.argsort(-scores)
        correct = int((s[order[:k]] > 0).sum() + (s[order[-k:]] < 0).sum())
        positive += one_run.epsilon_lower_bound(m, 2 * k, correct, 0.0, 0.95) > 0
    from scipy.stats import binom

    assert positive <= binom.ppf(0.999, 400, 0.05)


def test_new_token_canaries_are_betrayed_without_noise_and_hidden_by_strong_noise(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text("""
[task]
n_train = 150
n_test = 40
""" + TINY_MODEL + """[canaries]
m = 40
design = "new-token"
length = 2
[train]
epochs = 8
batch_size = 16
lr = 1e-2
delta = 1e-5
[evaluate]
attacks = ["loss", "reference", "exposure"]
batch_size = 16
[[variants]]
name = "non-private"
target_epsilon = inf
[[variants]]
name = "dp"
target_epsilon = 0.2
batch_size = 64
""")
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    rep = {v: json.loads((tmp_path / "out" / v / "report" / "report.json").read_text()) for v in ("non-private", "dp")}
    auc = {v: r["attacks"]["loss"]["auc"] for v, r in rep.items()}
    assert auc["non-private"] > 0.95  # every inserted canary's own tokens were learnt
    assert abs(auc["dp"] - 0.5) < 0.25
    best = {v: r["empirical_best"]["epsilon_lb"] for v, r in rep.items()}
    assert best["non-private"] > 0.5 and best["dp"] <= 0.2
    assert rep["dp"]["canary_plan"]["design"] == "new-token"
    assert any("exposure skipped" in n for n in rep["dp"]["notes"])
    # the checkpoint carries the extended tokenizer: evaluate and shards read it from there
    ck = tmp_path / "out" / "dp" / "checkpoint"
    parts = []
    for i in (1, 2):
        assert main(["evaluate", str(ck), "--out", str(tmp_path / f"p{i}"), "--shard", f"{i}/2", "--quiet"]) in (0, None)
        parts += ["--merge", str(tmp_path / f"p{i}")]
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "merged"), *parts, "--quiet"]) in (0, None)
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert merged["attacks"] == rep["dp"]["attacks"]


def test_docs_design_examples_run_as_written(tmp_path, monkeypatch, capsys):
    """docs/canary_designs.md: its bash lines (the base-model ones with a tiny base saved as my-base) and its
    Python block for an external loop, then `dpaudit evaluate` reads the extended tokenizer from the folder."""
    import re
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "canary_designs.md").read_text()
    from dpaudit.tasks.models import ModelSpec, build

    monkeypatch.chdir(tmp_path)
    model, tokenizer = build(ModelSpec(name="tiny-gpt2", vocab_size=2048, n_embd=32, n_layer=2, n_head=2, max_len=32))
    model.save_pretrained("my-base")
    tokenizer.save_pretrained("my-base")
    Path("my-model").mkdir()
    lines = [ln.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S) for ln in b.splitlines()]
    runs = [ln for ln in lines if ln.startswith("dpaudit ")]
    assert len(runs) == 7 and sum("--base-model my-base" in ln for ln in runs) == 2
    for ln in runs:
        assert main(shlex.split(ln)[1:]) == 0, capsys.readouterr().err
    for name, design in (("rare.json", "rare-token"), ("bigram.json", "bigram")):
        man = canaries.load_manifest(Path("my-model") / name)
        assert man.plan.design == design and len(man.plan.symbols) == 256 and canaries.regenerate(man)
    assert canaries.load_manifest(Path("my-model") / "rated.json").plan.sample_rate == 0.01  # canaries at their rate
    block = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    exec(block, {"model": model, "tokenizer": tokenizer})
    assert len(tokenizer) == 2048 + 500 * 3
    model.save_pretrained("my-model")  # untrained: this checks the plumbing, not the audit's power
    tokenizer.save_pretrained("my-model")
    assert main(["card", "--epsilon", "1.47", "--delta", "1e-5", "--sigma", "0.9", "--sample-rate", "0.004",
                 "--steps", "3000", "--accountant", "prv", "--out", "my-model/privacy_card.json"]) == 0
    assert main(["evaluate", "my-model", "--out", "report", "--quiet"]) == 0, capsys.readouterr().err
    rep = json.loads(Path("report/report.json").read_text())
    assert rep["canary_plan"]["design"] == "new-token" and rep["audit_plan"]["status"] == "as planned"
