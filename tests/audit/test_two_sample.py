"""The two-sample threshold test of independent canaries (dpaudit/audit/two_sample.py): its arithmetic against
scipy, its validity (at most 5% of audits above the truth, tested by the exact binomial tail) on mechanisms
whose true epsilon is known, its power, and the plan on a subsampled Gaussian checked against audits of the
mechanism itself."""

import math

import numpy as np
import pytest
from scipy.stats import beta, binom

from dpaudit.accounting import dpa_pld
from dpaudit.accounting.events import SubsampledGaussian
from dpaudit.audit import two_sample as ts
from dpaudit.audit.auditor import ScoreAuditor
from dpaudit.audit.many_run import gdp_epsilon
from dpaudit.audit.mechanism_limit import simulated_scores

RUNS = 1000


def _at_most_5_percent(exceed: int, runs: int) -> bool:
    """False only when the exceedances are evidence (p < 0.001, exact binomial tail) of a rate above 5%."""
    return binom.sf(exceed - 1, runs, 0.05) >= 0.001


def test_the_bound_is_clopper_pearson_by_hand():
    tp, n_in, fp, n_out, delta, conf = 300, 1000, 20, 1000, 1e-5, 0.95
    lo = beta.ppf(0.025, tp, n_in - tp + 1)
    hi = beta.isf(0.025, fp + 1, n_out - fp)
    assert ts.epsilon_from_counts(tp, n_in, fp, n_out, delta, conf) == pytest.approx(math.log((lo - delta) / hi))
    assert ts.epsilon_from_counts(0, n_in, 0, n_out, 0.0, conf) == 0.0
    assert ts.ceiling(1000, 1000, 0.0, conf) == pytest.approx(math.log(0.025 ** (1 / 1000) / (1 - 0.025 ** (1 / 1000))))


@pytest.mark.parametrize("eps", [1.0, 2.0])
@pytest.mark.parametrize("m", [1000, 10_000, 400_000])
def test_valid_and_sharp_on_randomised_response(eps, m):
    """Pure eps-DP randomised response, the threshold between its two outputs fixed in advance: the bound exceeds
    eps in at most 5% of 1,000 audits, and its median is within reach of eps at m = 10^4."""
    rng = np.random.default_rng([m, int(eps * 10)])
    p = math.exp(eps) / (1 + math.exp(eps))
    n_in = rng.binomial(m, 0.5, RUNS)
    tp, fp = rng.binomial(n_in, p), rng.binomial(m - n_in, 1 - p)
    b = np.array([ts.epsilon_from_counts(a, n, c, m - n, 0.0, 0.95) for a, n, c in zip(tp, n_in, fp)])
    assert _at_most_5_percent(int(np.sum(b > eps)), RUNS)
    assert np.median(b) > {1000: 0.7, 10_000: 0.85, 400_000: 0.97}[m] * eps  # not valid by being useless


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("m", [1000, 10_000])
def test_tuned_threshold_valid_on_gaussian(mu, m):
    """mu-GDP scores (N(mu, 1) inserted, N(0, 1) held out), the threshold tuned on a seeded half: at most 5% of
    audits above the mechanism's true eps at delta = 1e-3, and the medians grow with mu and m."""
    delta, truth = 1e-3, gdp_epsilon(mu, 1e-3)
    rng = np.random.default_rng([m, int(mu * 10), 1])
    runs = 400
    out = []
    for i in range(runs):
        signs = rng.random(m) < 0.5
        scores = rng.standard_normal(m) + mu * signs
        out.append(ts.tuned(scores[signs], scores[~signs], delta, 0.95, seed=i).epsilon_lb)
    assert _at_most_5_percent(int(np.sum(np.array(out) > truth)), runs)
    # power: the medians measured on 60 seeds were 0.14 / 0.60 (mu 0.5), 0.87 / 1.72 (mu 1), 2.22 / 3.64 (mu 2)
    assert np.median(out) > {0.5: 0.05, 1.0: 0.6, 2.0: 1.8}[mu] * (1 if m == 1000 else 2)


def test_null_scores_show_nothing_and_a_leak_is_found():
    rng = np.random.default_rng(3)
    null = [ts.tuned(rng.standard_normal(500), rng.standard_normal(500), 1e-5, 0.95, seed=i).epsilon_lb
            for i in range(RUNS)]
    assert _at_most_5_percent(int(np.sum(np.array(null) > 0)), RUNS)
    leak = ts.bound_at(rng.normal(10, 1, 5000), rng.normal(0, 1, 5000), 5.0, 1e-5)  # no noise worth the name
    assert leak.epsilon_lb > 0.95 * leak.ceiling and leak.ceiling > 7


def test_plan_then_audit_a_subsampled_gaussian_stays_below_its_epsilon():
    """The card's mechanism (q = 0.5, sigma = 1, 4 steps), the threshold planned from the card alone, then 300
    audits of the mechanism itself with fresh randomness: at most 5% above its PLD epsilon, the median close to
    the plan's limit, and the plan's limit above the one-run analysis' for the same canaries."""
    q, s, T, m, delta = 0.5, 1.0, 4, 4000, 1e-5
    truth = dpa_pld.epsilon([SubsampledGaussian(q, s, T)], delta)
    p = ts.plan(q, s, T, m // 2, m // 2, delta, 0.95, budget=4e6)
    assert p is not None and 0 < p["limit"] < truth
    runs, bounds = 300, []
    for i in range(runs):
        held_out, ins = simulated_scores(np.random.default_rng([i, 11]), q, s, T, m // 2)
        bounds.append(ts.bound_at(ins, held_out, p["threshold"], delta).epsilon_lb)
    bounds = np.array(bounds)
    assert _at_most_5_percent(int(np.sum(bounds > truth)), runs)
    assert abs(np.median(bounds) - p["limit"]) < 0.15


def test_the_plans_median_bounds_are_each_simulated_audits_epsilon_from_counts():
    """The plan reads each count's Clopper-Pearson limit once; its rows must be what every simulated audit's
    epsilon_from_counts gives, draw by draw, on the same pools and binomial draws."""
    args = (0.2, 1.0, 20, 60, 80, 1e-5, 0.95, 3, 4000)  # q, sigma, T, n_in, n_out, delta, confidence, seed, pool
    got = ts._plan_rows(*args)
    held_out, ins = ts._card_pools(0.2, 1.0, 20, 3, 4000)
    rng = np.random.default_rng([3, 2030])
    want = []
    for f in ts.FPR_GRID:
        if f * 4000 < ts.MIN_TAIL:
            continue
        t = float(np.quantile(held_out, 1.0 - f))
        p1, p0 = float(np.mean(ins > t)), float(np.mean(held_out > t))
        tps, fps = rng.binomial(60, p1, ts.PLAN_DRAWS), rng.binomial(80, p0, ts.PLAN_DRAWS)
        b = np.median([ts.epsilon_from_counts(int(a), 60, int(c), 80, 1e-5, 0.95) for a, c in zip(tps, fps)])
        want.append({"fpr": f, "threshold": t, "tpr": p1, "median_epsilon_lb": float(b)})
    assert got == want and any(r["median_epsilon_lb"] > 0 for r in got)


def test_the_auditor_and_bad_input():
    rng = np.random.default_rng(5)
    signs = rng.random(4000) < 0.5
    scores = rng.standard_normal(4000) + 3.0 * signs
    a = ScoreAuditor(scores, signs)
    fixed = a.two_sample(delta=1e-5, threshold=2.5)
    assert fixed == ts.bound_at(scores[signs], scores[~signs], 2.5, 1e-5)
    assert a.two_sample(delta=1e-5, seed=1).threshold_rule.startswith("threshold tuned")
    with pytest.raises(ValueError, match="finite"):
        ts.bound_at([1.0], [0.0], float("nan"), 0.0)
    with pytest.raises(ValueError, match="NaN"):
        ts.bound_at([float("nan")], [0.0], 0.5, 0.0)
    with pytest.raises(ValueError, match="confidence"):
        ts.epsilon_from_counts(1, 2, 0, 2, 0.0, 1.0)


def test_the_docs_example_and_the_commands(tmp_path, capsys):
    """docs/methods.md's two-sample example as written; `audit scores --strategy two-sample` and `audit plan
    --two-sample` print the auditor's and the plan's numbers; --threshold elsewhere is one line, exit 2."""
    import json
    import re
    from pathlib import Path

    from dpaudit.cli import main

    text = (Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "two_sample" in b)
    exec(compile(block, "docs/methods.md", "exec"), {})
    assert capsys.readouterr().out.startswith("eps >= ")
    rng = np.random.default_rng(2)
    ins, out = rng.normal(3, 1, 300), rng.normal(0, 1, 300)
    (tmp_path / "s.json").write_text(json.dumps({"inserted": ins.tolist(), "held_out": out.tolist()}))
    assert main(["audit", "scores", str(tmp_path / "s.json"), "--strategy", "two-sample", "--threshold", "2",
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["two_sample"]
    assert got == ts.bound_at(ins, out, 2.0, 0.0).to_dict()
    assert main(["audit", "scores", str(tmp_path / "s.json"), "--threshold", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--threshold is for --strategy two-sample" in err and len(err.splitlines()) == 1
    assert main(["audit", "scores", str(tmp_path / "s.json"), "--strategy", "two-sample", "--guesses", "5,5"]) == 2
    assert "--guesses is for --strategy fixed" in capsys.readouterr().err
    assert main(["audit", "plan", "--sample-rate", "0.5", "--sigma", "1", "--steps", "4", "--canaries", "2000",
                 "--two-sample", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["two_sample"]["limit"] > 1.0 and 0 < row["two_sample"]["fpr"] < 1


def test_a_probe_record_from_an_opacus_loop_gets_the_test(tmp_path):
    """The Opacus tutorial's loop (make_private, SGD, zero_grad / backward / step) with attach_probe's default block
    canaries: the record the probe writes, read as `dpaudit evaluate` reads it, gets the two-sample row at the
    threshold its card plans, and an honest run's bound stays below the card's epsilon."""
    import torch
    from opacus import PrivacyEngine
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit import api
    from dpaudit.audit import families
    from dpaudit.evaluation import scoring

    torch.manual_seed(0)
    n, b = 256, 32
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,))), batch_size=b)
    engine = PrivacyEngine(accountant="prv")
    model, opt, loader = engine.make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                                             max_grad_norm=1.0)
    probe = api.attach_probe(opt, sample_rate=b / n, m=2000, seed=0, model=model, on_fail=None)
    for _ in range(3):
        for x, y in loader:
            opt.zero_grad()
            if len(x):
                nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    probe.save(tmp_path)
    card = api.card_from_opacus(engine, loader, opt, delta=1e-5)
    card.save(tmp_path / "privacy_card.json")
    wb = scoring.whitebox(tmp_path, card.audited_mechanism(), card)
    assert wb[0]["statistic"] == "likelihood_ratio" and wb[0]["probe"]["coordinates"] == "block"
    plan = families.Plan(signs=np.array([1, -1]), k_pos=1, k_neg=1, group_size=1, deltas=(("claimed", 1e-5),),
                         confidence=0.95, rule="bonferroni", seed=0, whitebox_delta=1e-5)
    (row,) = families.two_sample_rows(plan, wb, 0.95)
    assert row["n_in"] + row["n_out"] == 2000 and 0 <= row["epsilon_lb"] <= card.claim.epsilon_value
    ev = card.events[0]
    want = ts.plan(ev.sample_rate, ev.noise_multiplier, ev.steps, row["n_in"], row["n_out"], 1e-5, 0.95)
    assert row["threshold"] == want["threshold"]
