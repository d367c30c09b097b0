"""The best one-run audit of the card's own mechanism, and the white-box guess count fixed from it
(dpaudit/audit/mechanism_limit.py): exact against mu-GDP where the mechanism is Gaussian, never above the
mechanism's true epsilon, chosen from the card alone, and what it changes on the demo's mechanism."""

import numpy as np
import pytest

from dpaudit.audit import families, fdp, many_run, mechanism_limit, one_run, whitebox_lr

DEMO = {"sample_rate": 0.06264, "noise_multiplier": 0.6305, "steps": 32}  # the 32-step demo card (reports/demo to 2026-11-25)


def test_without_subsampling_the_mechanism_is_gaussian_and_both_limits_agree():
    # q = 1, one step: the likelihood ratio is monotone in x ~ N(1, sigma^2) vs N(0, sigma^2), i.e. exactly
    # (1/sigma)-GDP: the simulated mechanism and ideal_limit's mu-GDP give the same median count
    sigma, m, k, delta = 0.7, 1000, 100, 1e-5
    eps = many_run.gdp_epsilon(1 / sigma, delta)
    ideal = fdp.ideal_limit(m, k, k, eps, delta, sims=1000)
    assert ideal["mu"] == pytest.approx(1 / sigma, rel=1e-6)
    mech = mechanism_limit.limit(m, k, {"sample_rate": 1.0, "noise_multiplier": sigma, "steps": 1}, delta, 0.95)
    assert mech["simulations"] == 1000
    assert abs(mech["median_right"] - ideal["median_right"]) <= 2, (mech, ideal)
    assert abs(mech["epsilon_lb"] - ideal["epsilon_lb"]) < 0.1


def test_the_limit_of_a_few_step_mechanism_is_far_below_the_gdp_limit_of_its_epsilon():
    # the demo's card: eps = 8 at delta 1e-5 comes from rare events; what an audit of 1000 canaries can show
    # about this mechanism is far below what it shows about a 1.67-GDP mechanism of the same epsilon
    lim = mechanism_limit.limit(1000, 250, DEMO, 1e-5, 1 - 0.05 / 3)
    ideal = fdp.ideal_limit(1000, 250, 250, 8.0, 1e-5, 1 - 0.05 / 3, sims=400)
    assert 0.6 < lim["epsilon_lb"] < 1.0 and ideal["epsilon_lb"] > 2.0


def test_the_guess_count_is_the_best_of_its_grid_and_beats_a_quarter():
    st = mechanism_limit.study(1000, DEMO["sample_rate"], DEMO["noise_multiplier"], DEMO["steps"], 1e-5,
                               1 - 0.05 / 3)
    assert st["k"][0] == 250 and st["best_k"] == st["k"][int(np.argmax(st["epsilon_lb"]))]
    quarter = st["epsilon_lb"][0]
    best = max(st["epsilon_lb"])
    assert best > quarter + 0.2  # ~1.10 at k = 71 against 0.81 at m/4
    # a function of the card, m, delta and confidence only: the same k every time, whatever the scores
    assert mechanism_limit.best_k(1000, DEMO, 1e-5, 1 - 0.05 / 3) == st["best_k"]


def test_bounds_at_the_chosen_guesses_stay_below_the_true_epsilon():
    """Simulated one-run audits of a subsampled Gaussian whose epsilon dp_accounting gives exactly (3.09, below the
    ceiling 3.26 of the k + k guesses the card fixes), the f-DP bound at 95%: valid, with power. Not sharp: a white-box
    one-run bound on a Gaussian sits far below its epsilon, so this test fails a bound inflated about 5x, not 10%
    (tests/audit/test_fdp.py's randomised response is the sharp one)."""
    from dpaudit.accounting import dpa_pld
    from dpaudit.accounting.events import SubsampledGaussian
    from tests.audit.level import above, allowed, detectable_inflation

    q, sigma, T, m, delta = 0.25, 1.2, 4, 400, 1e-5
    true_eps = dpa_pld.epsilon([SubsampledGaussian(sample_rate=q, noise_multiplier=sigma, steps=T)], delta)
    params = {"sample_rate": q, "noise_multiplier": sigma, "steps": T}
    k = mechanism_limit.best_k(m, params, delta, 0.95)
    assert true_eps < fdp.approx_dp_epsilon_lower_bound(m, 2 * k, 2 * k, delta)  # the test can fail
    rng = np.random.default_rng(7)
    lbs = []
    for _ in range(200):
        signs = np.where(rng.random(m) < 0.5, 1, -1)
        x = ((rng.random((T, m)) < q) & (signs > 0)) + sigma * rng.standard_normal((T, m))
        r = one_run.audit(whitebox_lr.subsampled_gaussian_llr(x, q, sigma), signs, k, k, delta, 0.95)
        lbs.append(fdp.audit(r.v, m, k, k, delta, 0.95).epsilon_lb)
    assert above(lbs, true_eps) <= allowed(200) and np.median(lbs) > 0.2  # valid, and not vacuous
    assert detectable_inflation(lbs, true_eps, 200) < 6  # what this test can catch, stated above


def test_long_runs_beyond_the_budget_keep_a_quarter_and_print_no_mechanism_limit():
    long = {"sample_rate": 0.01, "noise_multiplier": 1.0, "steps": 10 ** 6}
    assert mechanism_limit.study(1000, 0.01, 1.0, 10 ** 6, 1e-5, 0.95) is None
    wb = {"signs": np.array([1, -1] * 500), "statistic": "likelihood_ratio", "statistic_params": long}
    assert families.whitebox_guesses(wb, 1e-5, 0.95)[0] == 250
    assert mechanism_limit.limit(1000, 250, long, 1e-5, 0.95) is None
    # the sum statistic (no per-step projections, or no noise) keeps m/4 + m/4 too
    assert families.whitebox_guesses({**wb, "statistic": "sum"}, 1e-5, 0.95)[0] == 250


def test_white_box_rows_use_the_fixed_guesses_and_limits_carry_the_mechanism():
    rng = np.random.default_rng(3)
    m, T = 400, DEMO["steps"]
    signs = np.where(rng.random(m) < 0.5, 1, -1)
    x = ((rng.random((T, m)) < DEMO["sample_rate"]) & (signs > 0)) + DEMO["noise_multiplier"] * \
        rng.standard_normal((T, m))
    wb = {"name": "whitebox_gradient", "kind": "dirac", "signs": signs, "statistic": "likelihood_ratio",
          "statistic_params": DEMO,
          "scores": whitebox_lr.subsampled_gaussian_llr(x, DEMO["sample_rate"], DEMO["noise_multiplier"])}
    plan = families.Plan(signs=np.array([1, -1] * 10), k_pos=5, k_neg=5, group_size=1,
                         deltas=(("claimed", 1e-5), ("zero", 0.0)), confidence=0.95, rule="bonferroni", seed=0,
                         whitebox_delta=1e-5)
    rows = families.one_run_rows({"loss": rng.normal(size=20)}, plan, [wb])
    k = mechanism_limit.best_k(m, DEMO, 1e-5, 1 - 0.05 / 2)
    w = [e for e in rows if e.attack == "whitebox_gradient"]
    assert k != m // 4 and all(e.k_pos == e.k_neg == k for e in w)
    assert "from the card's mechanism" in w[0].threshold_rule and w[0].tier == "in-run"
    from dpaudit.audit.mechanism import Audited, GaussianMechanism

    mech = Audited(GaussianMechanism(**DEMO))
    lim = [x for x in families.limits(rows, 8.0, mech) if x["attack"] == "whitebox_gradient"][0]
    ml = lim["mechanism_limit"]
    assert ml["k_pos"] == k and ml["epsilon_lb"] < lim["epsilon_lb"]  # below the mu-GDP limit of eps = 8
    assert ml["fraction"] == pytest.approx(w[0].epsilon_lb / ml["epsilon_lb"])
    # a mechanism with another phase (DP-FROST's selection) is not simulated
    two = Audited(GaussianMechanism(**DEMO, alone=False))
    assert "mechanism_limit" not in families.limits(rows, 8.0, two)[0]


def test_audits_resampled_from_a_pool_agree_with_whole_simulated_audits():
    # the same mechanism both ways: whole audits (the budget allows them) and audits resampled from pools of
    # per-canary scores (what many canaries over many steps get); the median counts agree within sampling noise
    q, sigma, T, m = 0.1, 0.8, 30, 400
    whole = mechanism_limit.study(m, q, sigma, T, 1e-5, 0.95)
    budget = 2 * T * mechanism_limit.POOL_PER_CANARY * m * 3  # too small for MIN_SIMS whole audits: the pool path
    assert mechanism_limit.n_sims(m, T, budget) == 0
    pooled = mechanism_limit.study(m, q, sigma, T, 1e-5, 0.95, budget=budget)
    assert whole["pool"] == 0 and pooled["pool"] == 3 * mechanism_limit.POOL_PER_CANARY * m
    assert pooled["simulations"] == mechanism_limit.MAX_SIMS and pooled["k"] == whole["k"]
    for k, a, b in zip(whole["k"], whole["median_right"], pooled["median_right"]):
        assert abs(a - b) <= max(2, 0.03 * 2 * k), (k, a, b)


def test_many_canaries_over_many_steps_get_a_limit_and_fixed_guesses_from_the_pool():
    # reports/demo_lm dp-eps8-m5000's card: 5,000 canaries over 327 steps is beyond whole simulated audits
    lm = {"sample_rate": 0.06133, "noise_multiplier": 0.9724, "steps": 327}
    assert mechanism_limit.n_sims(5000, 327) == 0
    st = mechanism_limit.study(5000, lm["sample_rate"], lm["noise_multiplier"], lm["steps"], 1e-5, 1 - 0.05 / 7)
    assert st is not None and st["pool"] >= mechanism_limit.POOL_PER_CANARY * 5000
    assert st["best_k"] < 1250 and max(st["epsilon_lb"]) > st["epsilon_lb"][0]
    lim = mechanism_limit.limit(5000, st["best_k"], lm, 1e-5, 1 - 0.05 / 7)
    assert lim["pool"] == st["pool"] and lim["epsilon_lb"] == max(st["epsilon_lb"])


def test_audits_read_from_the_pools_tails_agree_with_whole_simulated_audits():
    # many canaries (the probe's block): neither whole audits nor a pool of 10 m scores per class fit the budget,
    # so the count is read from the pools' tails; on a mechanism small enough for whole audits both agree
    q, sigma, T, m = 0.1, 0.8, 30, 4000
    whole = mechanism_limit.study(m, q, sigma, T, 1e-5, 0.95)
    tails = mechanism_limit.study(m, q, sigma, T, 1e-5, 0.95, budget=2 * T * 30_000)
    assert whole["method"] == "audits" and tails["method"] == "tails" and tails["k"] == whole["k"]
    for k, a, b in zip(whole["k"], whole["median_right"], tails["median_right"]):
        assert abs(a - b) <= max(3, 0.03 * 2 * k), (k, a, b)


def test_ten_thousand_canaries_get_a_limit_above_five_thousand():
    # demo_lm's DP card: the mechanism's limit grows with m (10,000 canaries read from the pools' tails)
    lm = {"sample_rate": 0.06133, "noise_multiplier": 0.9724, "steps": 327}
    small = mechanism_limit.study(5000, lm["sample_rate"], lm["noise_multiplier"], lm["steps"], 1e-5, 0.95)
    big = mechanism_limit.study(10_000, lm["sample_rate"], lm["noise_multiplier"], lm["steps"], 1e-5, 0.95,
                                budget=2 * lm["steps"] * 30_000)  # a 30,000-score pool per class: the tails
    assert big["method"] == "tails" and big["best_k"] in mechanism_limit.k_grid(10_000)
    assert min(mechanism_limit.k_grid(10_000)) == 10_000 // 200  # the large-m divisors join where k >= 50
    assert max(big["epsilon_lb"]) > max(small["epsilon_lb"]) + 0.1
    assert mechanism_limit.k_grid(1000) == [250, 166, 125, 100, 71, 50, 33, 25, 16, 10]  # small audits unchanged


def test_audit_plan_prints_the_limit_of_each_m_before_training(capsys):
    import json

    from dpaudit.cli import main

    assert main(["audit", "plan", "--sample-rate", "0.1", "--sigma", "1.0", "--steps", "20", "--canaries",
                 "200,1000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["m"] for r in rows] == [200, 1000] and rows[1]["epsilon_lb"] > rows[0]["epsilon_lb"] > 0
    st = mechanism_limit.study(1000, 0.1, 1.0, 20, 1e-5, 0.95)
    assert rows[1]["best_k"] == st["best_k"] and rows[1]["epsilon_lb"] == max(st["epsilon_lb"])
    assert main(["audit", "plan", "--sample-rate", "0.1", "--sigma", "1.0", "--steps", "20", "--canaries", "1"]) == 2
    assert "integers >= 2" in capsys.readouterr().err


def test_a_report_of_many_canaries_keeps_a_histogram_and_a_thinned_roc(tmp_path):
    """Above 20,000 canaries report.json keeps counts per bin and at most 2,000 ROC points (the metrics still use
    every score); the schema accepts it and the plots draw it."""
    from dpaudit.report import plots

    rng = np.random.default_rng(0)
    m = 25_000
    signs = np.where(rng.random(m) < 0.5, 1, -1)
    wb = {"name": "whitebox_gradient", "kind": "dirac", "signs": signs, "scores": rng.normal(size=m) + (signs > 0)}
    row = families.attack_rows({}, signs[:10], [wb])["whitebox_gradient"]
    assert "scores" not in row and "signs" not in row and len(row["roc"][0]) <= families.ROC_POINTS_MAX
    h = row["histogram"]
    assert sum(h["inserted"]) == (signs > 0).sum() and sum(h["held_out"]) == (signs < 0).sum()
    assert row["auc"] == pytest.approx(0.76, abs=0.02)  # from every score
    small = families.attack_rows({}, signs[:10], [{**wb, "signs": signs[:500], "scores": wb["scores"][:500]}])
    assert len(small["whitebox_gradient"]["scores"]) == 500  # small sets keep every score, as before
    files = plots.draw({"attacks": {"whitebox_gradient": row}, "exposure": {}}, tmp_path)
    assert any(f.endswith("scores.png") for f in files)
