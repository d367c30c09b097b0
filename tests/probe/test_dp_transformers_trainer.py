"""dp-transformers 1.0.0's own trainer, as shipped, with the probe attached by ``ProbeCallback`` (issue wave 5 · 3/5
item 5; experiments/dp_transformers_trainer.py). Its default ``ShuffledAuthorSampler`` draws shuffled fixed-size
batches while its accountants account Poisson sampling at q = B / N: the gate must fail ``sampling`` and say
fixed-size batches (not duplicated records, not another rate). The same trainer with the package's own
``PoissonAuthorSampler`` must pass every check. Skipped where the optional peer is not installed
(``make test-dp-transformers`` installs it)."""

from __future__ import annotations

import json

import pytest

from tests.scripts_loader import load_script

pytest.importorskip("dp_transformers", reason="the optional peer: make test-dp-transformers installs it")



DPT = load_script("experiments", "dp_transformers_trainer")
CONF = load_script("experiments", "probe_conformance")


def _statuses(folder, card):
    checks, fails = CONF.judge(folder, card)
    return {c["check"]: c for e in checks for c in e["checks"]}, fails


def test_as_shipped_its_fixed_size_batches_accounted_as_poisson_fail_sampling_by_name(tmp_path):
    probe, card, folder = DPT.run("shuffled", tmp_path / "shipped", n=160, batch=16, epochs=3, m=100, on_fail=None)
    # the card is dp-transformers' own accounting: Poisson at q = B / N, one event per step, its sigma
    (e,) = card.events
    assert (e.sampler, e.sample_rate, e.noise_multiplier, e.steps) == ("poisson", 16 / 160, 1.0, probe.steps) == (
        "poisson", 0.1, 1.0, 30)
    checks, fails = _statuses(folder, card)
    assert checks["sampling"]["status"] == "fail", checks["sampling"]
    finding = checks["sampling"]["finding"]
    assert "fixed-size batches" in finding and "duplicated" not in finding and "another rate" not in finding
    assert [f for f in fails if "mechanism check 'sampling'" in f] and not [
        f for f in fails if "mechanism check 'noise'" in f or "mechanism check 'clipping'" in f]
    assert probe.online.alarms["sampling"]["step"] <= 10  # flagged online too, early in the run


def test_with_its_own_poisson_sampler_every_check_passes(tmp_path):
    probe, card, folder = DPT.run("poisson", tmp_path / "poisson", n=160, batch=16, epochs=3, m=100, on_fail=None)
    checks, fails = _statuses(folder, card)
    assert not fails, fails
    assert {k: c["status"] for k, c in checks.items()} == dict.fromkeys(
        ("noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"), "pass")  # weights: the model
    assert not probe.online.alarms  # its save_pretrained wrote is the one the probe watched
    # the gate end to end on what the run saved: the card binds the probe's records (its run id)
    assert card.extra["probe_runs"] and (folder / "gradient_canaries.json").exists()


def test_the_experiments_command_line(tmp_path, capsys):
    assert DPT.main(["--sampler", "shuffled", "--out", str(tmp_path / "cli")]) == 0
    out = capsys.readouterr().out
    said = json.loads(out[out.rindex('{\n "sampler"'):])
    assert said["sampler"] == "shuffled" and said["steps"] == 48  # 3 epochs of 256 records in batches of 16
    assert said["rdp_epsilon"] > said["claimed_epsilon"] > 0  # its RDP value; the card's is PRV's, tighter
    assert (tmp_path / "cli" / "privacy_card.json").exists() and (tmp_path / "cli" / "gradient_canaries.json").exists()
