"""Choosing the threshold strategy before the scores exist (dpaudit/audit/strategy_plan.py, `dpaudit audit strategy`)
from a simulated mechanism (dpaudit/audit/simulated.py): the mechanisms' true epsilons against independent
formulas, the choice where one strategy clearly wins (fixed guesses on randomised response, a tuned split on a weak
Gaussian attack with many canaries), seeds that are none of the power table's, and the command's one-line errors."""

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.audit import simulated, strategy_plan
from dpaudit.audit.many_run import gdp_epsilon
from dpaudit.cli import main
from dpaudit.cli.audit import pld_epsilon

DELTA = 1e-5


def test_true_epsilons_match_their_formulas():
    assert simulated.parse("null").true_epsilon(DELTA) == 0.0
    assert simulated.parse("gaussian:1").true_epsilon(DELTA) == pytest.approx(gdp_epsilon(1.0, DELTA))
    e = math.exp(2.0)
    assert simulated.parse("rr:2").true_epsilon(DELTA) == pytest.approx(math.log(e - DELTA * (1 + e)))
    auc = float(norm.cdf(1.0 / math.sqrt(2.0)))  # mu = 1's AUC
    assert simulated.parse(f"auc:{auc}").mu == pytest.approx(1.0, abs=1e-9)
    sub = simulated.parse("subsampled:1,2,1")  # q = 1, one step: the Gaussian mechanism, mu = 1 / sigma
    assert sub.true_epsilon(DELTA, pld_epsilon) == pytest.approx(gdp_epsilon(0.5, DELTA), rel=1e-3)
    with pytest.raises(ValueError, match="needs an accountant"):
        sub.true_epsilon(DELTA)


def test_draws_have_the_stated_separation():
    rng = np.random.default_rng(0)
    sc, s = simulated.parse("gaussian:2").draw(rng, 20000)
    assert sc[s > 0].mean() - sc[s < 0].mean() == pytest.approx(2.0, abs=0.05)
    sc, s = simulated.parse("rr:1").draw(rng, 20000)
    agree = np.mean(np.sign(sc) == s)
    assert agree == pytest.approx(math.e / (1 + math.e), abs=0.01)


@pytest.mark.parametrize("spec,fix", [("foo:1", "write null, gaussian:MU"), ("gaussian", "takes 1 finite"),
                                      ("gaussian:x", "numbers separated by commas"), ("rr:nan", "finite"),
                                      ("auc:0.3", "out of range"), ("subsampled:0.5,1,2.5", "whole number"),
                                      ("subsampled:0.5,1", "takes 3")])
def test_bad_mechanisms_name_the_fix(spec, fix):
    with pytest.raises(ValueError, match=fix):
        simulated.parse(spec)


def test_the_plan_picks_fixed_guesses_for_randomised_response():
    r = strategy_plan.choose(simulated.parse("rr:4"), 1000, DELTA, sims=5)
    assert r["choice"] == "fixed" and r["medians"]["fixed"] == max(r["medians"].values())


def test_the_plan_picks_a_tuned_split_for_a_weak_attack_with_many_canaries():
    """Gaussian mu = 1 at m = 4,000: fixed m/4 + m/4 guesses leave most of the bound on the table
    (reports/score_auditor)."""
    r = strategy_plan.choose(simulated.parse("gaussian:1"), 4000, DELTA, sims=3)
    assert r["choice"] in ("held-out", "median"), r
    assert r["medians"][r["choice"]] > 1.2 * r["medians"]["fixed"], r


def test_null_ties_go_to_the_default():
    r = strategy_plan.choose(simulated.parse("null"), 400, DELTA, sims=3)
    assert r["choice"] == "fixed" and max(r["medians"].values()) == 0.0


def test_the_plans_seeds_are_none_of_the_power_tables():
    mech = simulated.parse("gaussian:1")
    plan_first = mech.draw(np.random.default_rng([0, strategy_plan.PLAN_STREAM, 1000, 0]), 1000)[0]
    for i in range(5):  # experiments/score_auditor_power.py draws seed i as [i, m]
        assert not np.array_equal(plan_first, mech.draw(np.random.default_rng([i, 1000]), 1000)[0])


def test_audit_strategy_command(capsys):
    assert main(["audit", "strategy", "--mechanism", "rr:4", "--canaries", "1000", "--sims", "5"]) == 0
    out = capsys.readouterr().out
    assert "<- chosen" in out and out.strip().endswith("dpaudit audit scores SCORES --strategy fixed")
    assert main(["audit", "strategy", "--mechanism", "null", "--canaries", "40", "--sims", "2"]) == 0
    assert "no strategy shows a bound" in capsys.readouterr().out
    assert main(["audit", "strategy", "--mechanism", "auc:0.6", "--canaries", "500", "--sims", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["medians"]) == set(strategy_plan.CANDIDATES) and d["choice"] in d["medians"]
    assert d["true_epsilon"] == pytest.approx(simulated.parse("auc:0.6").true_epsilon(DELTA))


@pytest.mark.parametrize("args,needle", [
    (["--mechanism", "bogus", "--canaries", "1000"], "unknown mechanism"),
    (["--mechanism", "subsampled:0.5,0.5,10000", "--canaries", "100000", "--sims", "1"], "at most 20,000,000"),
    (["--mechanism", "rr:2", "--canaries", "100000", "--sims", "1000"], "pass --sims 10 or fewer"),  # days of work
    (["--mechanism", "rr:2", "--canaries", "7"], "--canaries"),
    (["--mechanism", "rr:2", "--canaries", "1000", "--delta", "2"], "--delta must be"),
])
def test_audit_strategy_refuses_in_one_line(args, needle, capsys):
    assert main(["audit", "strategy", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err


def test_the_committed_table_has_the_plan_within_ten_percent_of_the_best():
    """reports/score_auditor (docs/methods.md's claim): on every mechanism and m, the strategy the plan chose on its
    own seeds has a median at least 90% of the largest strategy's on the table's seeds."""
    from pathlib import Path

    rows = json.loads((Path(__file__).resolve().parents[2] / "reports" / "score_auditor" / "results.json").read_text())
    cells = {}
    for r in rows:
        cells.setdefault((r["mechanism"], r["m"]), {})[r["strategy"]] = r
    assert {spec for spec, _ in cells} >= {"null", "rr:1", "rr:2", "rr:4", "gaussian:0.5", "gaussian:1", "gaussian:2",
                                           "gaussian:4"} and {m for _, m in cells} == {1000, 10000}
    for key, c in cells.items():
        top = max(x["median_bound"] for x in c.values())
        chosen = c[next(iter(c.values()))["plan_choice"]]["median_bound"]
        assert chosen >= 0.9 * top, (key, chosen, top)
