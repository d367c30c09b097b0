"""End to end on a tiny config: train non-private and DP, audit, and check that the report's numbers
come from the run (recomputed here from the saved scores, card and checkpoint)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from dpaudit import accounting
from dpaudit.audit import fdp, one_run
from dpaudit.claim.card import load_card
from dpaudit.cli import main


def _report(run_dir, variant):
    return json.loads((run_dir / variant / "report" / "report.json").read_text())


def test_layout(run_dir):
    for v in ("non-private", "dp"):
        ck = run_dir / v / "checkpoint"
        for f in ("model/model.safetensors", "privacy_card.json", "canaries.json", "run.json"):
            assert (ck / f).exists(), f
        for f in ("REPORT.md", "report.json", "roc.png", "scores.png", "exposure.png"):
            assert (run_dir / v / "report" / f).exists(), f
    assert (run_dir / "REPORT.md").exists() and (run_dir / "report.json").exists()
    assert not list(run_dir.rglob("*.partial"))
    # the DP variant reports how hard clipping bit (table, section, plot); the non-private one has no clipping
    assert (run_dir / "dp" / "report" / "clipping.png").exists()
    assert not (run_dir / "non-private" / "report" / "clipping.png").exists()
    assert "Clipping at C = " in (run_dir / "dp" / "report" / "REPORT.md").read_text()
    assert "units clipped per step" in (run_dir / "REPORT.md").read_text()


def test_numbers_come_from_the_run(run_dir):
    for v in ("non-private", "dp"):
        r = _report(run_dir, v)
        man = json.loads((run_dir / v / "checkpoint" / "canaries.json").read_text())
        signs = np.array([c["sign"] for c in man["canaries"]])
        for a in r["attacks"].values():
            s = np.array(a["signs"]) if "signs" in a else signs  # white-box canaries carry their own
            assert a["auc"] == pytest.approx(roc_auc_score(s > 0, a["scores"]))
        # a consistency check, not evidence of the bounds: the report's numbers are the auditor's on the report's own
        # counts (the bounds themselves are held to independent values in tests/audit/test_fdp.py and test_one_run.py)
        for e in r["empirical"]:
            lb = one_run.epsilon_lower_bound(e["m"], e["r"], e["v"], e["delta"], e["confidence"]) / e["group_size"]
            assert e["steinke_epsilon_lb"] == pytest.approx(lb)
            f = fdp.approx_dp_epsilon_lower_bound(e["m"], e["r"], e["v"], e["delta"], e["confidence"]) / e["group_size"]
            assert e["epsilon_lb"] == pytest.approx(f) and abs(f - lb) < 0.06
            if e["attack"] == "whitebox_gradient":
                assert e["k_pos"] == e["k_neg"] == e["m"] // 4
            else:
                assert e["k_pos"] == man["audit_plan"]["k_pos"] and e["k_neg"] == man["audit_plan"]["k_neg"]
        card = load_card(run_dir / v / "checkpoint" / "privacy_card.json")
        assert r["claim"]["epsilon"] == card.claim.epsilon
        if card.is_private:
            again = accounting.compute(card.events, card.claim.delta, card.claim.accountant).epsilon
            assert card.claim.epsilon == pytest.approx(again)
            assert card.claim.epsilon <= 0.5 + 1e-9
            assert card.intended == {"epsilon": 0.5, "source": "train.target_epsilon (the noise multiplier "
                                     "calibrated to it)"}  # the gate's intended-vs-achieved check reads it
            assert r["claim"]["intended_epsilon"] == 0.5
            assert {x["accountant"] for x in r["accounting"]["results"]} == {"rdp", "prv", "pld", "dpa_rdp"}
            assert r["verdict"]["status"] == "consistent"
        else:
            assert r["verdict"]["status"] == "no-claim" and card.intended is None


def test_nonprivate_leaks_more_than_dp(run_dir):
    nonp, dp = _report(run_dir, "non-private"), _report(run_dir, "dp")
    assert nonp["attacks"]["loss"]["auc"] > 0.9
    assert nonp["empirical_best"]["epsilon_lb"] > 0
    assert dp["empirical_best"]["epsilon_lb"] <= 0.5
    assert nonp["exposure"]["mean_inserted"] > dp["exposure"]["mean_inserted"] + 1.0


def test_evaluate_is_deterministic_and_redacts(run_dir, tmp_path, capsys):
    out = tmp_path / "again"
    assert main(["evaluate", str(run_dir / "non-private" / "checkpoint"), "--out", str(out), "--redact",
                 "--enumerate-limit", "0"]) == 0  # as the run's config
    a = _report(run_dir, "non-private")
    b = json.loads((out / "report.json").read_text())
    for k in ("attacks", "empirical", "accounting", "metrics", "verdict"):
        assert json.dumps(a[k], sort_keys=True) == json.dumps(b[k], sort_keys=True), k
    assert all(c["secret"] == "REDACTED" for c in b["exposure"]["canaries"])
    secrets = [c["secret"] for c in a["exposure"]["canaries"]]
    md = (out / "REPORT.md").read_text()
    assert not any(s in md for s in secrets)


def test_evaluate_bad_card_exit_2(run_dir, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(run_dir / "dp" / "checkpoint", ck)
    card = json.loads((ck / "privacy_card.json").read_text())
    del card["mechanism"]["events"][0]["noise_multiplier"]
    (ck / "privacy_card.json").write_text(json.dumps(card))
    out = tmp_path / "r"
    assert main(["evaluate", str(ck), "--out", str(out)]) == 2
    assert "noise_multiplier" in capsys.readouterr().err and not out.exists()
    (ck / "canaries.json").unlink()
    card["mechanism"]["events"][0]["noise_multiplier"] = 1.0
    (ck / "privacy_card.json").write_text(json.dumps(card))
    assert main(["evaluate", str(ck), "--out", str(out)]) == 2
    err = capsys.readouterr().err  # no canaries planted: the post-hoc audits are named, nothing is written
    assert "has no canaries.json" in err and "dpaudit audit identifiers" in err and not out.exists()


def test_base_metrics_measure_the_model_before_fine_tuning(run_dir, tmp_path):
    """--base-metrics adds the task metric of the model the trainer started from (rebuilt from run.json's
    model spec: here the seeded initialisation), recomputed here independently."""
    from dpaudit import checkpoint
    from dpaudit.tasks import models, sentiment

    out = tmp_path / "base"
    ck_dir = run_dir / "non-private" / "checkpoint"
    assert main(["evaluate", str(ck_dir), "--out", str(out), "--attacks", "loss", "--off-plan", "--base-metrics",
                 "--quiet"]) == 0
    r = json.loads((out / "report.json").read_text())
    ck = checkpoint.load(ck_dir)
    start, tok = models.build(models.ModelSpec(**ck.run["model"]))
    task = ck.run["task"]
    test = sentiment.load(task["source"], task["n_train"], task["n_test"], task["seed"]).test
    assert r["metrics"]["base_model"]["accuracy"] == pytest.approx(sentiment.accuracy(start.eval(), tok, test,
                                                                                      max_len=ck.run["model"]["max_len"]))
    assert r["metrics"]["accuracy"] == _report(run_dir, "non-private")["metrics"]["accuracy"]
    assert "before fine-tuning" in (out / "REPORT.md").read_text()
    assert "base_model" not in _report(run_dir, "non-private")["metrics"]  # off by default


def test_evaluation_follows_the_plan_fixed_before_training(run_dir, tmp_path, capsys):
    ck = run_dir / "dp" / "checkpoint"
    plan = json.loads((ck / "canaries.json").read_text())["audit_plan"]["evaluation"]
    r = _report(run_dir, "dp")
    assert r["audit_plan"]["status"] == "as planned" and r["audit_plan"]["used"] == plan
    # a setting that departs from the plan is refused in one line, writing nothing
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "x"), "--confidence", "0.8", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--confidence" in err and "--off-plan" in err and not (tmp_path / "x").exists()
    # allowed with --off-plan: marked exploratory, and the CI gate fails it
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "y"), "--confidence", "0.8", "--attacks", "loss",
                 "--off-plan", "--quiet"]) == 0
    y = json.loads((tmp_path / "y" / "report.json").read_text())
    assert y["audit_plan"]["status"] == "off-plan" and y["verdict"]["reason"].startswith("EXPLORATORY")
    assert "Exploratory: off the evaluation plan" in (tmp_path / "y" / "REPORT.md").read_text()
    policy = Path(__file__).resolve().parents[2] / "configs" / "policy.toml"
    assert main(["check", str(tmp_path / "y" / "report.json"), "--policy", str(policy)]) == 1
    assert "departs from the plan" in capsys.readouterr().out


def test_report_states_what_the_canaries_can_resolve(run_dir):
    r = _report(run_dir, "dp")
    md = (run_dir / "dp" / "report" / "REPORT.md").read_text()
    # ~30 held-out canaries cannot resolve an FPR of 0.1% or 1%: the table says so
    n_out = r["attacks"]["loss"]["n_nonmembers"]
    assert f": {n_out} held-out canaries resolve no FPR below 1/{n_out}" in md
    # the audit's own limit beside the claim's tests, and the estimates labelled as such
    assert r["audit_limits"] and "the best possible one-run audit" in md
    assert "not a bound" in md or not r["exposure"]
    assert "δ = 0 rows: a pure-DP bound, not comparable with the (ε, δ) claim" in md
    wb = [e for e in r["empirical"] if e["attack"] == "whitebox_gradient" and e["delta_kind"] == "claimed"][0]
    assert wb["statistic"] == "likelihood_ratio" and wb["claim_curve_rejected"] is False
    lim = [x for x in r["audit_limits"] if x["attack"] == "whitebox_gradient"][0]
    assert lim["m"] == 200 and lim["reached_epsilon_lb"] == wb["epsilon_lb"] <= lim["epsilon"]
