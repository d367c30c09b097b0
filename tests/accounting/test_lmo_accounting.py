"""LMO-DP's noise and both of its accountings: the paper's (the claim) and dpaudit's d-dimensional one.

Numbers come from closed forms, quadrature, Opacus' Gaussian RDP, Monte-Carlo draws of the trainer's own
sampler, and the brief's worked examples (docs/methods.md, LMO-DP)."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from dpaudit.accounting import lmo_paper, lmo_vector, rdp_general
from dpaudit.accounting.lmo_noise import LmoNoise
from dpaudit.errors import DpauditError
from dpaudit.trainers.noise import LaplaceMixture, sample_inverse_scale

BRIEF = LmoNoise(0.3, 0.2, 0.5, 2.0, 0.5, 5.0, 0.5, 1.5)  # the brief's example: Gamma(2, .5), Exp(5), U(.5, 1.5)


def fixed(y0: float) -> LmoNoise:
    """A (numerically) fixed inverse scale y0: Laplace of scale 1 / y0."""
    return LmoNoise(0, 0, 1.0, u_low=y0, u_high=y0 * (1 + 1e-7))


def test_mgf_matches_the_trainers_sampler_in_both_forms():
    g = torch.Generator().manual_seed(1)
    for noise in (BRIEF, LmoNoise(0.2, 0.3, 0.5, 2.0, 0.5, 5.0, 0.5, 1.5, form="mixture")):
        y = sample_inverse_scale(noise, (400_000,), g, "cpu").numpy()
        for t in (0.4 * noise.t_max(), -1.0, -4.0):  # below t_max / 2: the Monte-Carlo mean has a finite variance
            mc = np.exp(t * y)
            assert abs(mc.mean() - math.exp(noise.log_mgf(t))) < 4 * mc.std() / math.sqrt(y.size)
    with pytest.raises(DpauditError, match="must be 1"):
        LmoNoise(0.3, 0.2, 0.4, form="mixture")


def test_density_integrates_to_one_and_gives_the_briefs_noise_moments():
    val, _ = integrate.quad(lambda x: math.exp(BRIEF.log_density(x)), -np.inf, np.inf)
    assert val == pytest.approx(1.0, abs=1e-7)
    assert BRIEF.mean_abs_noise() == pytest.approx(1.31, abs=0.005)  # the brief: E|Z| 1.31, Var Z 3.80
    assert BRIEF.noise_variance() == pytest.approx(3.80, abs=0.01)
    z = LaplaceMixture(BRIEF).sample(torch.zeros(300_000, dtype=torch.float64), torch.Generator().manual_seed(2), False)
    assert z.abs().mean().item() == pytest.approx(BRIEF.mean_abs_noise(), rel=0.01)


def test_fixed_laplace_at_equal_paper_rdp_has_less_noise_than_the_mixture():
    """Critical issue 2: E[g(Y)] >= g(E[Y]), so a deterministic scale with the same bound is less noisy."""
    target = lmo_paper.scalar_rdp(BRIEF, 1.0, 2)
    lo, hi = 0.01, 10.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if lmo_paper.scalar_rdp(fixed(mid), 1.0, 2) < target else (lo, mid)
    y0 = lo
    assert 1 / y0 == pytest.approx(1.13, abs=0.01)  # E|Z| of the fixed scale (the brief: 1.13 vs the mixture's 1.31)
    assert 2 / y0 ** 2 == pytest.approx(2.56, abs=0.02)  # Var Z (the brief: 2.56 vs 3.80)
    assert BRIEF.mean_abs_noise() - 1 / y0 > 0.15


def test_general_c_rdp_matches_quadrature_and_the_printed_eq4_only_at_c_1():
    for C in (0.5, 1.0, 2.0):
        for a in (2, 5):
            exact_fixed = lmo_paper.exact_scalar_rdp(fixed(1.3), C, a)
            assert lmo_paper.scalar_rdp(fixed(1.3), C, a) == pytest.approx(exact_fixed, rel=1e-5)
            assert lmo_paper.exact_scalar_rdp(BRIEF, C, a) <= lmo_paper.scalar_rdp(BRIEF, C, a)  # Jensen
    assert lmo_paper.printed_eq4_rdp(BRIEF, 1.0, 5) == pytest.approx(lmo_paper.scalar_rdp(BRIEF, 1.0, 5), rel=1e-12)
    wrong = lmo_paper.printed_eq4_rdp(BRIEF, 0.5, 5)
    assert wrong > 2.5 * lmo_paper.scalar_rdp(BRIEF, 0.5, 5)  # 0.895 vs 0.317
    assert math.isinf(lmo_paper.scalar_rdp(BRIEF, 1.0, 10))  # M_Y(9) diverges: (alpha - 1) a1 theta >= 1


def test_binomial_form_equals_opacus_for_the_gaussian_and_zhu_wang_is_above_it():
    from opacus.accountants.analysis.rdp import compute_rdp

    sigma, q = 1.1, 0.02
    orders = list(range(2, 65))
    base = {a: a / (2 * sigma ** 2) for a in range(2, 65)}
    tight = rdp_general.poisson_subsampled(base, q, orders, bound="binomial")
    general = rdp_general.poisson_subsampled(base, q, orders)
    ref = compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=orders)
    for a, r in zip(orders, ref):
        assert tight[a] == pytest.approx(r, rel=1e-9)
        assert general[a] >= r
    assert rdp_general.poisson_subsampled(base, 1.0, [5])[5] == base[5]


def test_the_all_orders_matrix_equals_the_sum_written_per_order():
    """poisson_subsampled sums every order in one matrix; Zhu & Wang's Thm 6 written out order by order (scipy's
    logsumexp) is the reference, with an infinite base order that only the orders above it need."""
    from scipy.special import gammaln, logsumexp

    q, base = 0.03, {a: 0.02 * a ** 1.5 for a in range(2, 41)}
    base[30] = math.inf
    got = rdp_general.poisson_subsampled(base, q, range(2, 41))
    for a in range(2, 41):
        ls = np.arange(2, a + 1)
        eps = np.array([base[int(j)] for j in ls])
        terms = (gammaln(a + 1) - gammaln(ls + 1) - gammaln(a - ls + 1) + ls * math.log(q)
                 + (a - ls) * math.log1p(-q) + (ls - 1) * eps + np.where(ls >= 3, math.log(3), 0.0))
        want = logsumexp(np.r_[(a - 1) * math.log1p(-q) + math.log1p((a - 1) * q), terms]) / (a - 1)
        assert got[a] == (math.inf if a >= 30 else pytest.approx(want, rel=1e-12)), a


def test_the_step_curve_of_all_orders_equals_the_scalar_rdp_of_each():
    for noise in (BRIEF, LmoNoise(a1=0.2, a2=0.3, a3=0.5, gamma_k=2.0, gamma_theta=0.3, exp_rate=2.0, u_low=0.5,
                                  u_high=1.5, form="mixture")):
        curve = lmo_paper.step_curve(noise, 0.7, range(2, 30))
        for a, v in curve.items():
            want = lmo_paper.scalar_rdp(noise, 0.7, a)
            assert v == (math.inf if math.isinf(want) else pytest.approx(want, rel=1e-12)), a


def test_conversion_floors_and_the_printed_eq1():
    assert rdp_general.floor(1e-10, 128) == pytest.approx(0.1353, abs=1e-4)  # Table 2's 0.16 sits just above
    assert rdp_general.floor(8e-6, 128) == pytest.approx(0.0464, abs=1e-4)  # Table 1's 0.046807 sits just above
    assert rdp_general.floor(1e-10, 128, "mironov") == pytest.approx(0.1813, abs=1e-4)
    assert rdp_general.floor(1e-10, 128, "paper_eq1") == pytest.approx(-1.72, abs=0.01)  # negative: not a conversion


def test_alg3_max_rule_can_never_reach_a_target_below_one():
    tiny = fixed(1e-4)  # scale 1e4: almost no privacy loss per step
    assert lmo_paper.claim(tiny, 1.0, 0.03, 197, 1e-10).epsilon < 0.2
    assert lmo_paper.alg3_max_rule(tiny, 1.0, 0.03, 197, 1e-10) > 21.0  # alpha = 2 dominates the max


def test_the_papers_per_step_budgets_do_not_give_its_totals():
    """App. E.1's per-step budgets {0.3, 0.7, 2, 3}, read as a scalar Laplace with C / b = e, on SST-2 (q = 0.0304,
    6 epochs = 197 steps, delta = 1e-10): the totals are far above Table 2's 0.16 and 0.3."""
    totals = [lmo_paper.claim(fixed(e), 1.0, 0.0304, 197, 1e-10).epsilon for e in (0.3, 0.7, 2.0, 3.0)]
    assert totals == sorted(totals)
    assert totals[0] > 0.5 and totals[1] > 1.2


def test_the_dense_direction_costs_more_than_the_scalar_analysis_and_kappa_bounds_every_dimension():
    C, a = 1.0, 8
    k, info = lmo_vector.kappa(BRIEF, C, a)
    assert info["dense_limit"] > 2 * info["dirac"]
    for d in (1, 2, 4, 16, 64):
        dense_d = d * lmo_paper.exact_scalar_rdp(BRIEF, C / math.sqrt(d), a)
        assert dense_d <= k * C ** 2 * (1 + 1e-6)
    # fixed-scale Laplace: the dense limit is alpha C^2 / (2 b^2) (Fisher information 1 / b^2)
    assert lmo_vector.kappa(fixed(2.0), 1.0, 4)[1]["dense_limit"] == pytest.approx(4 * 4 / 2, rel=1e-3)


def test_d_dimensional_rdp_against_monte_carlo_privacy_loss():
    """On d = 4 coordinates with per-coordinate draws, the RDP of the dense shift (exact, additive over
    coordinates) agrees with a Monte-Carlo estimate of E_Q[(P/Q)^a] from the sampler's own draws."""
    d, C, a = 4, 1.0, 3
    s = C / math.sqrt(d)
    exact = d * lmo_paper.exact_scalar_rdp(BRIEF, s, a)
    g = torch.Generator().manual_seed(3)
    z = LaplaceMixture(BRIEF).sample(torch.zeros(200_000, d, dtype=torch.float64), g, False).numpy()
    loss = (BRIEF.log_density(z - s) - BRIEF.log_density(z)).sum(1)  # log P/Q at draws from Q
    w = np.exp(a * loss)
    mc = math.log(w.mean()) / (a - 1)
    se = w.std() / math.sqrt(w.size) / w.mean() / (a - 1)
    assert abs(mc - exact) < 4 * se + 1e-3


def test_vector_accountant_is_above_the_claim_and_per_step_draws_with_heavy_tails_have_no_finite_bound():
    claim = lmo_paper.claim(BRIEF, 1.0, 0.03, 50, 1e-6).epsilon
    vec, detail = lmo_vector.epsilon_for(BRIEF, 1.0, "per_coordinate", 0.03, 50, 1e-6)
    assert vec > claim and "per-coordinate" in detail
    eps, detail = lmo_vector.epsilon_for(BRIEF, 1.0, "per_step", 0.03, 50, 1e-6)
    assert math.isinf(eps) and "no finite bound" in detail
    bounded = LmoNoise(0, 0, 1.0, u_low=0.5, u_high=1.0)  # a bounded Y: the per-step analysis is finite
    assert math.isfinite(lmo_vector.epsilon_for(bounded, 1.0, "per_step", 0.03, 50, 1e-6)[0])


def test_search_meets_the_target_with_the_least_noise_and_refuses_targets_below_the_floor():
    grid = {"a1": (0.5,), "a2": (0.1, 0.9), "a3": (0.5,), "gamma_k": (2.0,), "gamma_theta": (1.0,),
            "exp_rate": (1.0,), "u_low": (0.5,), "u_width": (1.0,)}
    res = lmo_paper.search(1.0, 1e-6, 0.05, 40, grid=grid)
    assert res.claim.epsilon <= 1.0 and res.claim.epsilon > 0.97  # the scale is pushed to the target
    assert res.candidates == 2 and res.feasible == 2
    with pytest.raises(DpauditError, match="smallest"):
        lmo_paper.search(0.1, 1e-10, 0.05, 40, grid=grid)


@pytest.mark.parametrize("kw, msg", [({"a1": 0.5, "gamma_k": 0}, "k > 0"), ({"a3": 1.0, "u_low": 0.0}, "0 < a < b"),
                                     ({"a2": 1.0, "exp_rate": -1.0}, "rate"), ({}, "not all 0")])
def test_infeasible_parameters_are_one_line_errors(kw, msg):
    with pytest.raises(DpauditError, match=msg):
        LmoNoise(**kw)


def test_pld_lower_bound_matches_dp_accounting_for_a_plain_laplace_and_stays_below_the_upper():
    from dp_accounting.pld import privacy_loss_distribution as pl

    from dpaudit.accounting import lmo_pld

    q, T, delta = 0.05, 50, 1e-5
    lo = lmo_pld.epsilon_lower(fixed(2.0), 1.0, q, T, delta, m=1)
    ref = pl.from_laplace_mechanism(0.5, sensitivity=1.0, sampling_prob=q, pessimistic_estimate=False,
                                    use_connect_dots=False).self_compose(T).get_epsilon_for_delta(delta)
    assert lo <= ref * (1 + 1e-3) and lo > 0.98 * ref  # 3.30 vs dp_accounting's 3.33
    up, _ = lmo_vector.epsilon_for(fixed(2.0), 1.0, "per_coordinate", q, T, delta)
    spread = lmo_pld.epsilon_lower(fixed(2.0), 1.0, q, T, delta, m=16)
    assert lo < spread <= up  # the dense pair leaks more than the Dirac pair, never more than the upper bound
    mix_lo, _ = lmo_pld.best_lower(BRIEF, 1.0, q, T, delta, (1, 4))
    assert mix_lo <= lmo_vector.epsilon_for(BRIEF, 1.0, "per_coordinate", q, T, delta)[0]


def test_a_laplace_calibrated_by_the_scalar_analysis_is_an_under_claim():
    """Critical issue 1 as numbers: per-coordinate Laplace whose scalar (paper) epsilon is about 3.3 has a true
    epsilon of at least 10 — a pair spreading C over 16 coordinates."""
    from dpaudit.accounting import lmo_pld

    q, T, delta = 0.05, 50, 1e-5
    claim = lmo_paper.claim(fixed(2.0), 1.0, q, T, delta).epsilon
    assert claim < 4.0
    assert lmo_pld.epsilon_lower(fixed(2.0), 1.0, q, T, delta, m=16) > 2.5 * claim


def test_pair_loss_distribution_against_monte_carlo():
    """The m = 4 base loss distribution (rounded down) against Monte-Carlo draws of the trainer's sampler: its
    mean (the KL divergence) and upper tail sit at or just below the Monte-Carlo ones."""
    from dpaudit.accounting import lmo_pld

    m, C = 4, 1.0
    s = C / math.sqrt(m)
    p1, _, lo = lmo_pld.coordinate_loss_pmfs(BRIEF, s)
    p, plo = lmo_pld._compose(p1, lo, m)
    L = (np.arange(p.size) + plo) * lmo_pld.BASE_GRID
    g = torch.Generator().manual_seed(4)
    x = LaplaceMixture(BRIEF).sample(torch.zeros(200_000, m, dtype=torch.float64), g, False).numpy() + s
    mc = (BRIEF.log_density(x - s) - BRIEF.log_density(x)).sum(1)
    se = mc.std() / math.sqrt(mc.size)
    assert p.sum() == pytest.approx(1.0, abs=1e-6)
    assert float((p * L).sum()) <= mc.mean() + 4 * se and float((p * L).sum()) > mc.mean() - 4 * se - 0.01
    t = np.quantile(mc, 0.99)
    assert float(p[L > t].sum()) <= 0.01 + 4 * math.sqrt(0.01 * 0.99 / mc.size)


def test_lmo_account_cli_refuses_a_noise_whose_mgf_diverges_at_every_order():
    from dpaudit.cli import main

    assert main(["lmo", "account", "--noise", '{"a1": 1, "gamma_k": 2, "gamma_theta": 5}', "--delta", "1e-5",
                 "--steps", "10", "--sample-rate", "0.1"]) == 2
    assert main(["lmo", "account", "--noise", "{not json", "--delta", "1e-5", "--steps", "10",
                 "--sample-rate", "0.1"]) == 2
