"""The final-weights scores (attacks/final_weights.py): on simulated rows whose truth is known, on a real model's
hidden states, and end to end through an external Opacus loop (examples/final_weights_opacus.py) and the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit.attacks import final_weights as fw
from dpaudit.audit import many_run, one_run

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import final_weights_validity as sim  # noqa: E402


def _auc(scores, signs) -> float:
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    n_in = int((signs > 0).sum())
    return (ranks[signs > 0].sum() - n_in * (n_in + 1) / 2) / (n_in * (len(scores) - n_in))


def test_without_noise_every_inserted_canary_ranks_above_every_held_out_one():
    """An audit that must find the leak: no noise, a large shared push; the centred projection separates the two
    sides perfectly and the planned test reaches its ceiling."""
    rng = np.random.default_rng(0)
    change, states, signs = sim.simulate_rows(rng, 400, 32, 10, sigma=0.0, push=5.0)
    sc = fw.scores(change, states)["final_weights"]
    assert _auc(sc, signs) == 1.0
    r = one_run.audit(sc, signs, 40, 40, delta=1e-5, confidence=0.975)
    assert r.v == r.r  # every guess right


def test_the_centring_removes_the_push_every_row_shares():
    """The softmax pushes every new row alike: with no signal, the centred score does not depend on that push."""
    rng = np.random.default_rng(1)
    change, states, _ = sim.simulate_rows(rng, 200, 16, 10, sigma=1.0, push=0.0)
    pushed = change + torch.randn(16, dtype=torch.float64) * 100.0  # one vector, added to every row
    a, b = fw.scores(change, states)["final_weights"], fw.scores(pushed, states)["final_weights"]
    np.testing.assert_allclose(a, b, atol=1e-8)
    norm_a, norm_b = fw.scores(change, states)["final_weights_norm"], fw.scores(pushed, states)["final_weights_norm"]
    assert not np.allclose(norm_a, norm_b)  # Panda et al.'s squared change is not centred: it sees the push


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
def test_the_planned_bound_stays_below_a_known_epsilon(epsilon):
    """On the simulated mechanism whose true epsilon is known (share 1, q = 1: mu-GDP), the planned test's 97.5%
    bound exceeds the truth in at most a few of 40 audits (binomial: 5 or more of 40 at a true rate of 2.5% has
    probability 0.7%), while its largest bounds come near the truth (so an inflated bound would cross it) and, at
    epsilon = 2, its median reaches a real fraction of it (the test has power)."""
    delta, k, conf = 1e-5, 33, 0.975
    rows = sim.study(40, 1000, 32, 10, [epsilon], delta, k, conf, seed=7)
    assert rows[0]["planned_above"] <= 4 / 40
    assert rows[0]["planned_max"] > 0.4 * epsilon
    if epsilon >= 2:
        assert rows[0]["planned_median"] > 0.2 * epsilon and rows[0]["auc"] > 0.6


@pytest.mark.parametrize("sigma", [3.0, 4.0])
def test_canaries_at_their_own_rate_keep_the_planned_bound_below_their_epsilon(sigma):
    """Canaries Poisson-sampled at their own rate (q = 0.3 over 30 steps, docs/canary_designs.md): the planned test's
    bound stays below the subsampled Gaussian's epsilon at that rate (the PLD accountant's, an upper bound on the
    true epsilon of the rows' sum) in all but a binomial allowance of 40 audits, and still shows something (median
    above 0: the design keeps power when the canaries are sampled)."""
    from dpaudit import accounting
    from tests.audit.level import above, allowed

    q, steps, delta = 0.3, 30, 1e-5
    truth = accounting.compute([accounting.SubsampledGaussian(q, sigma, steps)], delta, "pld").epsilon
    rng = np.random.default_rng([11, int(sigma)])
    bounds = []
    for _ in range(40):
        change, states, signs = sim.simulate_rows(rng, 1000, 32, steps, sigma, q=q)
        bounds.append(sim.planned_bound(fw.scores(change, states)["final_weights"], signs, 33, delta, 0.975))
    assert above(bounds, truth) <= allowed(40, level=0.025)
    assert np.median(bounds) > 0.1 * truth


def test_the_true_epsilon_of_the_simulated_mechanism():
    """mu-GDP's epsilon(delta) (Dong, Roth and Su) against dpaudit's own conversion."""
    for mu in (0.5, 1.0, 2.0):
        assert math.isclose(sim.gdp_epsilon(mu, 1e-5), many_run.gdp_epsilon(mu, 1e-5), rel_tol=1e-3)


def test_predicting_states_are_the_hidden_states_before_the_output_embedding():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=1, n_head=2)).eval()
    seqs = [[1, 2, 3, 4, 5], [6, 7, 8]]
    got = fw.predicting_states(model, seqs, [[2, 4], [1, 2]], pad=0, batch_size=2)
    with torch.no_grad():
        for i, (s, t) in enumerate(zip(seqs, [[2, 4], [1, 2]])):
            h = model(torch.tensor([s]), output_hidden_states=True).hidden_states[-1][0]
            for j, p in enumerate(t):
                torch.testing.assert_close(got[i, j], h[p - 1].double(), rtol=1e-5, atol=1e-5)


def _example():
    path = ROOT / "examples" / "final_weights_opacus.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, path


SMALL = ["--canaries", "60", "--records", "60", "--epochs", "2", "--batch-size", "32", "--width", "32",
         "--guess-fraction", "0.2"]


def test_an_external_loop_gets_the_final_weights_row_from_the_checkpoint_alone(tmp_path):
    """examples/final_weights_opacus.py (Opacus, no probe), then its docstring's `dpaudit evaluate` line on the folder
    it saved: the report holds the final_weights test in the tier "final weights", as planned before training."""
    from dpaudit.cli import main

    mod, path = _example()
    out = tmp_path / "fw"
    assert mod.main(["--out", str(out), "--insecure-rng", *SMALL]) == 0
    line = next(ln.strip() for ln in path.read_text().splitlines() if ln.strip().startswith("dpaudit evaluate"))
    argv = [a.replace("out/final_weights", str(out)) for a in shlex.split(line.split("#")[0])[1:]]
    assert main([*argv, "--quiet"]) == 0
    r = json.loads((out / "report" / "report.json").read_text())
    assert r["audit_plan"]["status"] == "as planned"
    rows = {e["attack"]: e for e in r["empirical"] if e["delta_kind"] == "claimed"}
    assert rows["final_weights"]["tier"] == "final weights" and rows["loss"]["tier"] == "outputs only"
    assert "final weights" in (out / "report" / "REPORT.md").read_text()


def test_without_dp_the_external_loop_memorises_and_the_final_weights_test_sees_it(tmp_path):
    """The same loop trained without noise: the final-weights score separates inserted from held-out canaries."""
    from dpaudit.cli import main

    mod, _ = _example()
    out = tmp_path / "np"
    assert mod.main(["--out", str(out), "--no-dp", *SMALL, "--epochs", "6"]) == 0
    assert main(["evaluate", str(out / "model"), "--out", str(out / "report"), "--quiet"]) == 0
    r = json.loads((out / "report" / "report.json").read_text())
    assert r["attacks"]["final_weights"]["auc"] > 0.95
    best = max(e["epsilon_lb"] for e in r["empirical"] if e["attack"] == "final_weights")
    assert best > 0.5
