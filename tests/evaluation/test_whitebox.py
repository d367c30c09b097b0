"""White-box gradient canaries: a mechanism with the noise its card claims passes; one whose noise is
smaller than claimed is caught (violated); no noise leaks to the ceiling."""

import json

import numpy as np
import pytest

from dpaudit import checkpoint
from dpaudit.canaries.manifest import CanaryPlan, generate
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.evaluation.options import EvalOptions
from dpaudit.evaluation.steps import evaluate
from dpaudit.report import write as report
from dpaudit.tasks import sentiment
from dpaudit.trainers import engine, fit, mechanism


def _train(tiny_model_factory, sigma_scale: float, target_epsilon: float, tmp_path, name, **engine_kw):
    model, tok = tiny_model_factory()
    data = sentiment.load(n_train=120, n_test=20)
    recs = [sentiment.encode_example(e, tok, "lm", 32) for e in data.train]
    cfg = engine.EngineConfig(target_epsilon=target_epsilon, delta=1e-5, epochs=4, batch_size=12, lr=1e-3,
                              clipping_norm=1.0, gradient_canaries=1000, **engine_kw)
    orig = mechanism.record_level
    mechanism.record_level = lambda *a, sigma, **k: orig(*a, sigma=sigma * sigma_scale, **k)  # noqa: E731
    try:
        model, res = engine.train(model, recs, cfg, tok.pad_token_id, 32)
    finally:
        mechanism.record_level = orig
    man = generate(CanaryPlan(m=20, repetitions=1))
    card = PrivacyCard(claim=Claim(epsilon=res.epsilon if res.private else None, delta=1e-5 if res.private else 0.0),
                       events=res.events, clipping_norm=1.0, expected_batch_size=12, dataset_size=len(recs))
    ck = checkpoint.write(tmp_path / name, model, tok, card, man, {}, extra_files=fit.canary_files(res))
    return ck, res


def test_whitebox_catches_too_little_noise(tiny_model_factory, tmp_path):
    ck, res = _train(tiny_model_factory, sigma_scale=0.05, target_epsilon=1.0, tmp_path=tmp_path, name="broken")
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    wb = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient" and e["delta_kind"] == "claimed"][0]
    assert wb["epsilon_lb"] > 1.0
    assert wb["statistic"] == "likelihood_ratio" and wb["claim_curve_rejected"] is True
    assert r["verdict"]["status"] == "violated"
    nc = r["noise_checks"][0]
    assert nc["status"] == "below the card" and nc["upper"] < nc["noise_multiplier"]
    # canaries on the model's coordinates share the records' gradients: no two-sample test (it assumes independence)
    assert "whitebox_two_sample" not in r
    report.write(r, tmp_path / "rep")
    assert "below the card's σ" in (tmp_path / "rep" / "REPORT.md").read_text()
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["verdict"]["status"] == "violated"


def test_whitebox_honest_noise_passes(tiny_model_factory, tmp_path):
    ck, _ = _train(tiny_model_factory, sigma_scale=1.0, target_epsilon=1.0, tmp_path=tmp_path, name="honest")
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    wb = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient" and e["delta_kind"] == "claimed"][0]
    assert wb["epsilon_lb"] <= 1.0
    assert wb["statistic"] == "likelihood_ratio" and wb["claim_curve_rejected"] is False
    assert r["verdict"]["status"] == "consistent"
    nc = r["noise_checks"]
    assert [c["attack"] for c in nc] == ["whitebox_gradient"] and nc[0]["status"] == "no shortfall"
    assert nc[0]["ratio"] >= 1.0 and nc[0]["upper"] >= nc[0]["noise_multiplier"]
    assert "whitebox_two_sample" not in r  # model coordinates: see test_engine_canaries_on_a_block_with_online_statistic
    steps = np.load(ck / "gradient_canaries.steps.npy")  # one row per applied update, adding up to the sums
    gc = json.loads((ck / "gradient_canaries.json").read_text())
    assert steps.shape == (gc["steps"], 1000) == (r["mechanism"]["events"][0]["steps"], 1000)
    np.testing.assert_allclose(steps.astype(float).sum(axis=0), gc["scores"], rtol=1e-4, atol=1e-3)


def test_noise_check_finds_a_shortfall_the_one_run_audit_cannot(tiny_model_factory, tmp_path):
    """80% of the card's noise: far too little excess leakage for a one-run audit to prove at ε = 1, but the
    per-step projections show it (dpaudit/audit/noise_check.py); the verdict's tests are unchanged by it."""
    ck, _ = _train(tiny_model_factory, sigma_scale=0.8, target_epsilon=1.0, tmp_path=tmp_path, name="short")
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    nc = r["noise_checks"][0]
    assert nc["status"] == "below the card" and nc["upper"] < nc["noise_multiplier"] and nc["ratio"] < 0.9
    # the headline: the run is not the card's mechanism (the noise check failed); the one-run audit itself proves
    # nothing above the claim, which the verdict keeps beside it
    assert r["verdict"]["status"] == "mechanism-mismatch" and "mechanism check 'noise' failed" in r["verdict"]["reason"]
    assert r["verdict"]["without_mechanism"] in ("underpowered", "consistent")


def test_whitebox_no_noise_reaches_ceiling(tiny_model_factory, tmp_path):
    ck, res = _train(tiny_model_factory, sigma_scale=1.0, target_epsilon=float("inf"), tmp_path=tmp_path, name="np")
    gc = res.gradient_canaries
    signs, scores = np.array(gc["signs"]), np.array(gc["scores"])
    # inserted canaries score about (times sampled) > 0; held-out ones about 0 (only real-data gradients)
    assert np.all(np.array(gc["times_sampled"])[signs < 0] == 0)
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    wb = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient"][0]
    assert wb["epsilon_lb"] > 0.7 * wb["ceiling"]  # a few inserted canaries are never sampled
    assert r["attacks"]["whitebox_gradient"]["auc"] > 0.95
    assert scores[signs > 0].mean() > scores[signs < 0].mean() + 1


def test_bad_gradient_canary_config():
    from dpaudit.errors import DpauditError

    with pytest.raises(DpauditError, match="gradient_canaries"):
        engine.EngineConfig(gradient_canaries=1)


def test_engine_canaries_on_a_block_with_online_statistic(tiny_model_factory, tmp_path):
    """gradient_canary_coordinates = "block", gradient_canary_online = true: dpaudit's own run keeps O(m) canary
    state on a parameter the model never reads; the audit reads the online likelihood ratio, and the probe's
    mechanism checks (clip canaries included) pass an honest run."""
    ck, res = _train(tiny_model_factory, sigma_scale=1.0, target_epsilon=1.0, tmp_path=tmp_path, name="block",
                     gradient_canary_coordinates="block", gradient_canary_online=True)
    assert not (ck / "gradient_canaries.steps.npy").exists() and "online" in res.gradient_canaries
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    wb = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient" and e["delta_kind"] == "claimed"][0]
    assert wb["statistic"] == "likelihood_ratio" and wb["epsilon_lb"] <= 1.0
    (entry,) = r["mechanism_checks"]
    # coverage: dpaudit's engine steps only its DP optimizer and does not hand the probe the model
    assert entry["coordinates"] == "block" and [c["status"] for c in entry["checks"]] == ["pass"] * 5 + ["not tested", "pass"]
    assert entry["checks"][-1]["check"] == "weights"  # the record is tied to the weights saved beside it
    assert "clip canaries of norm 4 C" in entry["checks"][2]["finding"]
    assert r["noise_checks"][0]["coordinates"] == "block"
    # block canaries are independent: the test past thresholding, its threshold from the card, its bound below ε
    ts = r["whitebox_two_sample"][0]
    assert ts["epsilon_lb"] <= 1.0 and ts["kind"].startswith("lower bound if the canaries are independent")
    from dpaudit.audit import two_sample
    from dpaudit.gate.policy import load_report

    ev = r["mechanism"]["events"][0]
    plan = two_sample.plan(ev["sample_rate"], ev["noise_multiplier"], ev["steps"], ts["n_in"], ts["n_out"], 1e-5,
                           ts["confidence"])
    assert ts["threshold"] == plan["threshold"] and ts["mechanism_limit"] == plan["limit"]
    assert ts["n_in"] == int(np.sum(np.array(res.gradient_canaries["signs"]) > 0))
    report.write(r, tmp_path / "rep")  # the schema holds the new rows; the report names the assumption
    assert load_report(tmp_path / "rep" / "report.json")["whitebox_two_sample"][0]["tp"] == ts["tp"]
    assert "Valid only if the canaries' scores are independent" in (tmp_path / "rep" / "REPORT.md").read_text()
    # sharded: the online record is read in the merge (the load step), as in one process
    from dpaudit.cli import main

    parts = []
    for i in (1, 2):
        assert main(["evaluate", str(ck), "--out", str(tmp_path / f"s{i}"), "--shard", f"{i}/2", "--attacks", "loss",
                     "--off-plan", "--quiet"]) in (0, None)
        parts += ["--merge", str(tmp_path / f"s{i}")]
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "merged"), *parts, "--quiet"]) in (0, None)
    merged = json.loads((tmp_path / "merged" / "report.json").read_text())
    white = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient"]
    assert white and [e for e in merged["empirical"] if e["attack"] == "whitebox_gradient"] == white
    assert merged["mechanism_checks"] == r["mechanism_checks"] and merged["noise_checks"] == r["noise_checks"]


def test_whitebox_canaries_for_user_wise_dp_sgd(tiny_model_factory):
    """Gradient canaries join user-wise DP-SGD as extra clipped units at the users' sampling rate: with
    honest noise the audit stays below the claim, with no noise it separates them."""
    from dpaudit.audit import noise_check, one_run, whitebox_lr

    model, tok = tiny_model_factory()
    texts = [e["sentence"] for e in sentiment.load(n_train=60).train]
    by_user = {f"u{i}": [sentiment.encode_text(t, tok, 32) for t in texts[i::20]] for i in range(20)}
    for eps in (1.0, float("inf")):
        model, tok = tiny_model_factory()
        cfg = engine.EngineConfig(target_epsilon=eps, delta=1e-5, epochs=4, batch_size=5, clipping_norm=1.0,
                                  gradient_canaries=500)
        model, res = engine.train_users(model, by_user, cfg, tok.pad_token_id, 32)
        gc = res.gradient_canaries
        signs, scores = np.array(gc["signs"]), np.array(gc["scores"])
        assert np.all(np.array(gc["times_sampled"])[signs < 0] == 0)
        r = one_run.audit(scores, signs, 125, 125, delta=1e-5 if res.private else 0.0)
        if res.private:
            assert r.epsilon_lb <= res.epsilon
            # the per-step likelihood ratio of the user-level mechanism: the steps add up, and it stays valid
            steps = gc["step_projections"]
            assert steps.shape == (res.steps, 500)
            np.testing.assert_allclose(steps.astype(float).sum(0), scores, rtol=1e-4, atol=1e-3)
            llr = whitebox_lr.subsampled_gaussian_llr(steps, gc["sample_rate"], res.noise_multiplier)
            assert one_run.audit(llr, signs, 125, 125, delta=1e-5).epsilon_lb <= res.epsilon
            # the user-level updates carry the card's noise in the same units (C / expected users per batch)
            assert noise_check.check(steps, res.noise_multiplier)["status"] == "no shortfall"
        else:
            assert r.epsilon_lb > 0.5 * r.ceiling


def test_an_engine_checkpoint_whose_weights_were_replaced_is_a_mechanism_mismatch(tiny_model_factory, tmp_path):
    """dpaudit's own run writes its record with a fingerprint of the weights it trained; a model saved over them
    (another run's, here the untrained base) makes the verdict mechanism-mismatch, naming the weights, at evaluation
    (dpaudit/probe/fingerprint.py)."""
    ck, _ = _train(tiny_model_factory, sigma_scale=1.0, target_epsilon=1.0, tmp_path=tmp_path, name="swapped",
                   gradient_canary_coordinates="block")
    base, _ = tiny_model_factory()
    base.save_pretrained(ck / "model")
    r = evaluate(ck, EvalOptions(attacks=("loss",)))
    (entry,) = r["mechanism_checks"]
    weights = {c["check"]: c for c in entry["checks"]}["weights"]
    assert weights["status"] == "fail" and [c["check"] for c in entry["checks"] if c["status"] == "fail"] == ["weights"]
    assert r["verdict"]["status"] == "mechanism-mismatch"
    assert r["verdict"]["reason"].startswith("the weights are not the ones the probe watched")
