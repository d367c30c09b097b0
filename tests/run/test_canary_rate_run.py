"""canaries.sample_rate end to end (issue wave 5 · 1/5 item 2): the dry run prints the rate and the claim at the
larger rate, `dpaudit run` trains the canaries at their rate with a card that states both rates and accounts the
larger, the report's audit limit of the planted canaries is the card's Gaussian at the canaries' rate, and the
commands that make and plan canaries take the rate."""

import json

import pytest

from dpaudit import accounting
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.run import dry_run
from tests.settings import TINY_RUN

RUN = TINY_RUN.replace("m = 20\n", "m = 20\nsample_rate = 0.1\n") + """
[train]
delta = 1e-5
epochs = 1
batch_size = 26
[[variants]]
name = "dp"
target_epsilon = 8.0
"""


def test_dry_run_and_run_sample_the_canaries_at_their_rate(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(RUN)
    (p,), _ = dry_run.plan(cfg)  # 120 records + about 10 canaries, B = 26: q = 0.2 > the canaries' 0.1
    q = p.sample_rate
    assert 0.19 < q < 0.21 and f"canaries sampled at 0.1, every record accounted at q = {q:.4g}" in p.noise
    assert 7.9 < p.claim <= 8.0 + 1e-9  # calibrated at q, the larger rate
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    ck = tmp_path / "out" / "dp" / "checkpoint"
    card = json.loads((ck / "privacy_card.json").read_text())
    (event,) = card["mechanism"]["events"]
    sampling = card["extra"]["sampling"]
    assert event["sample_rate"] == pytest.approx(q) and sampling["canaries"] == 0.1
    assert sampling["accounted"] == pytest.approx(q) and sampling["records"] == pytest.approx(q)
    assert sampling["canary_records"] > 0
    eps = accounting.compute([accounting.SubsampledGaussian(q, event["noise_multiplier"], event["steps"])],
                             card["claim"]["delta"], card["claim"]["accountant"]).epsilon
    assert card["claim"]["epsilon"] == pytest.approx(eps, rel=1e-6)  # the claim is the larger rate's
    assert json.loads((ck / "canaries.json").read_text())["sample_rate"] == 0.1
    report = json.loads((tmp_path / "out" / "dp" / "report" / "report.json").read_text())
    limits = [x["mechanism_limit"] for x in report["audit_limits"] if x.get("mechanism_limit")]
    assert limits and all(x["mechanism"]["sample_rate"] == 0.1 for x in limits)  # the canaries' own mechanism
    text = (tmp_path / "out" / "dp" / "report" / "REPORT.md").read_text()
    assert f"canary records at their own rate 0.1 (every record accounted at {q:.4g})" in text
    from dpaudit.report import markdown

    said = markdown._mechanism_limit_text(report["audit_limits"][0])  # (m = 20 shows 0: the line is left out)
    assert "of the card's mechanism with the canaries at their own rate (subsampled Gaussian q = 0.1," in said


def test_a_method_that_samples_at_one_rate_is_refused_before_training(tmp_path):
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(RUN.replace("[train]\n", "[train]\nmethod = \"lmo_dp\"\n"))
    with pytest.raises(DpauditError, match="canaries.sample_rate is honoured by dp_adam only"):
        dry_run.plan(cfg)
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert not (tmp_path / "out" / "lmo").exists()


def test_canaries_new_and_audit_plan_take_the_rate(tmp_path, capsys):
    out = tmp_path / "canaries.json"
    assert main(["canaries", "new", "--m", "50", "--seed", "1", "--sample-rate", "0.01", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["sample_rate"] == 0.01
    assert main(["canaries", "new", "--m", "50", "--sample-rate", "2", "--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()
    capsys.readouterr()
    args = ["audit", "plan", "--sample-rate", "0.2", "--sigma", "1.0", "--steps", "20", "--canaries", "200", "--json"]
    assert main(args) == 0
    same = json.loads(capsys.readouterr().out)
    assert main(args + ["--canary-rate", "0.05"]) == 0
    rarer = json.loads(capsys.readouterr().out)
    assert main(["audit", "plan", "--sample-rate", "0.05", "--sigma", "1.0", "--steps", "20", "--canaries", "200",
                 "--json"]) == 0
    assert rarer == json.loads(capsys.readouterr().out) and rarer[0]["epsilon_lb"] < same[0]["epsilon_lb"]
    assert main(args + ["--canary-rate", "0"]) == 2
