"""The f-DP one-run analysis (Mahloujifar, Melis, Chaudhuri 2024) and the per-step likelihood-ratio statistic:
published counts, validity over many simulated audits of mechanisms whose privacy is known, a test of the
claim's whole curve that keeps its level on an honest mechanism and catches a dishonest one."""

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.audit import fdp, many_run, one_run, whitebox_lr


@pytest.mark.parametrize("m, r, v, mu", [(1000, 100, 100, 1.218), (1000, 200, 180, 0.694), (1000, 100, 90, 0.602),
                                         (1000, 1000, 700, 0.357), (10000, 1000, 950, 0.884)])
def test_gdp_bound_matches_the_reference_implementation(m, r, v, mu):
    # facebookresearch/PrivacyGuard FDPAnalysisNode scans noise = 0.001 + 0.01 i (mu = 1 / noise): its mu is a
    # point of that coarse grid at or below ours, so ours is within one of its grid steps above it
    ours = fdp.gdp_mu_lower_bound(m, r, v)
    assert mu - 0.003 <= ours <= 1 / (1 / mu - 0.01) + 0.003


def test_approx_dp_reading_agrees_with_steinke_on_the_same_counts():
    for m, r, v in [(1000, 100, 100), (1000, 200, 180), (1000, 500, 450), (200, 100, 80)]:
        a = fdp.approx_dp_epsilon_lower_bound(m, r, v, 1e-5)
        b = one_run.epsilon_lower_bound(m, r, v, 1e-5)
        assert abs(a - b) < 0.06, (m, r, v, a, b)


def test_bounds_never_exceed_their_ceiling_and_grow_with_correct_guesses():
    m, r = 400, 100
    lbs = [fdp.approx_dp_epsilon_lower_bound(m, r, v, 1e-5) for v in range(50, r + 1, 5)]
    mus = [fdp.gdp_mu_lower_bound(m, r, v) for v in range(50, r + 1, 5)]
    assert lbs == sorted(lbs) and mus == sorted(mus)
    assert lbs[-1] == fdp.audit(r, m, 50, 50, 1e-5).ceiling and lbs[0] == 0.0


def test_rejection_is_monotone_in_the_curve():
    # a more private curve (smaller mu) is rejected whenever a less private one is: the rejected grid points
    # form one interval starting at 0
    rej = fdp.rejects(fdp.gdp_finv(fdp.MU_GRID), 1000, 300, 260)
    assert rej[0] and not rej[-1]
    first_kept = int(np.argmin(rej))
    assert not rej[first_kept:].any()


@pytest.mark.parametrize("m, r, v", [(1000, 300, 260), (1000, 100, 100), (1000, 100, 50), (50, 10, 0),
                                     (10 ** 6, 2000, 1500), (400, 100, 71)])
def test_the_grid_search_equals_scanning_the_whole_grid(m, r, v):
    """The bounds search the grid in rounds (seconds at 10^5 guesses); a scan of every grid point is the truth."""
    def scan(grid, finv):
        idx = np.flatnonzero(fdp.rejects(finv, m, r, v))
        return float(grid[idx.max()]) if idx.size else 0.0

    assert fdp.gdp_mu_lower_bound(m, r, v) == scan(fdp.MU_GRID, fdp.gdp_finv(fdp.MU_GRID))
    assert fdp.approx_dp_epsilon_lower_bound(m, r, v, 1e-5) == scan(fdp.EPS_GRID,
                                                                      fdp.approx_dp_finv(fdp.EPS_GRID, 1e-5))


def _simulated_right(scores_fn, m, k, sims, rng):
    """Number of right guesses (k highest in, k lowest out) over ``sims`` audits with canary coins of 1/2."""
    signs = rng.choice([-1, 1], size=(sims, m))
    sc = scores_fn(signs, rng)
    order = np.argsort(sc, axis=1, kind="stable")
    s = np.take_along_axis(signs, order, axis=1)
    return (s[:, m - k:] > 0).sum(axis=1) + (s[:, :k] < 0).sum(axis=1)


@pytest.mark.parametrize("mu", [0.5, 1.0])
def test_gaussian_mechanisms_bounds_are_valid(mu):
    """1000 simulated one-run audits of a mu-GDP mechanism (the canary's score is its optimal statistic): the 95%
    bound on mu exceeds the truth no more often than a binomial 5% allows, and so does the bound on eps where the
    true eps lies below the guesses' ceiling (mu = 0.5; at mu = 1 it does not, and no eps test could fail there).
    Valid, not sharp: one-run bounds on a Gaussian sit well below it (randomised response below is sharp)."""
    from tests.audit.level import above, allowed

    rng = np.random.default_rng(int(mu * 100))
    m, k, delta = 500, 100, 1e-5
    right = _simulated_right(lambda s, g: g.normal(size=s.shape) + mu * (s > 0), m, k, 1000, rng)
    true_eps = many_run.gdp_epsilon(mu, delta)
    assert mu < fdp.gdp_mu_lower_bound(m, 2 * k, 2 * k)  # the mu test can fail
    mu_lb = {v: fdp.gdp_mu_lower_bound(m, 2 * k, int(v)) for v in np.unique(right)}
    assert above([mu_lb[v] for v in right], mu) <= allowed(1000)
    if true_eps < fdp.approx_dp_epsilon_lower_bound(m, 2 * k, 2 * k, delta):
        eps_lb = {v: fdp.approx_dp_epsilon_lower_bound(m, 2 * k, int(v), delta) for v in np.unique(right)}
        assert above([eps_lb[v] for v in right], true_eps) <= allowed(1000)
    assert np.median([mu_lb[v] for v in right]) > 0.3 * mu  # and they are not vacuous


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_randomised_response_bounds_are_valid_and_a_10_percent_inflation_fails(eps):
    """Randomised response: the canary's bit is reported flipped with probability 1 / (1 + e^eps), a pure eps-DP
    mechanism; over 1000 audits the (eps, 0) reading exceeds eps no more often than a binomial 5% allows, and the
    same test fails the reading inflated by 10% (the mutation check)."""
    from tests.audit.level import assert_valid_and_sharp

    rng = np.random.default_rng(7)
    m, k = 2000, 500
    flip = 1 / (1 + np.exp(eps))

    def rr(s, g):
        out = np.where(g.random(s.shape) < flip, -s, s)
        return out + 1e-3 * g.random(s.shape)  # ties broken independently of the coins

    right = _simulated_right(rr, m, k, 1000, rng)
    lb = {v: fdp.approx_dp_epsilon_lower_bound(m, 2 * k, int(v), 0.0) for v in np.unique(right)}
    assert eps < fdp.approx_dp_epsilon_lower_bound(m, 2 * k, 2 * k, 0.0)
    assert_valid_and_sharp([lb[v] for v in right], eps)
    assert np.median([lb[v] for v in right]) > 0.8 * eps


def test_no_noise_reaches_the_ceiling():
    s = np.random.default_rng(0).choice([-1, 1], 1000)
    r = one_run.audit(s.astype(float), s, 250, 250, delta=1e-5)
    f = fdp.audit(r.v, r.m, 250, 250, 1e-5)
    assert r.v == 500 and f.epsilon_lb == f.ceiling > 5 and f.gdp_mu_lb == f.gdp_mu_ceiling


def test_likelihood_ratio_matches_a_direct_for_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 4)) + (rng.random((30, 4)) < 0.2)
    q, s = 0.2, 0.8
    want = [sum(np.log((q * norm.pdf(x[t, i], 1, s) + (1 - q) * norm.pdf(x[t, i], 0, s)) / norm.pdf(x[t, i], 0, s))
                for t in range(30)) for i in range(4)]
    np.testing.assert_allclose(whitebox_lr.subsampled_gaussian_llr(x, q, s), want, rtol=1e-10)


def test_likelihood_ratio_separates_better_than_the_sum():
    """The LM demo's mechanism (reports/demo_lm: q = 0.061, sigma = 0.97, T = 327): the sum separates by ~q sqrt(T) / sigma = 1.1,
    the per-step likelihood ratio by more, and its one-run bound is higher on the same coins."""
    rng = np.random.default_rng(3)
    m, T, q, sig = 1000, 327, 0.0613, 0.972
    signs = rng.choice([-1, 1], m)
    x = rng.normal(0, sig, (T, m)) + (rng.random((T, m)) < q) * (signs > 0)
    by_sum = one_run.audit(x.sum(axis=0), signs, 250, 250, 1e-5)
    by_lr = one_run.audit(whitebox_lr.subsampled_gaussian_llr(x, q, sig), signs, 250, 250, 1e-5)
    assert by_lr.v > by_sum.v + 10


def test_statistic_is_chosen_from_the_record_and_card_only():
    steps = np.zeros((5, 3))
    rec = {"scores": [0.0, 0.0, 0.0], "steps_array": steps, "sample_rate": 0.1}
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.audit.mechanism import Audited
    from dpaudit.claim.card import Claim, PrivacyCard

    def audited(*events):
        return PrivacyCard(claim=Claim(epsilon=1.0, delta=1e-5), events=list(events)).audited_mechanism()

    gauss = SubsampledGaussian(sample_rate=0.1, noise_multiplier=1.0, steps=5)
    assert whitebox_lr.choose(rec, audited(gauss))[0] == "likelihood_ratio"
    assert whitebox_lr.choose({"scores": [0.0] * 3}, audited(gauss))[0] == "sum"
    assert whitebox_lr.choose(rec, audited(SubsampledGaussian(0.1, 1.0, 6)))[0] == "sum"
    assert whitebox_lr.choose(rec, Audited(None, "no noise (sigma = 0)"))[0] == "sum"  # a card refuses sigma = 0
    assert whitebox_lr.choose(rec, audited(gauss, gauss))[0] == "sum"


def _canary_audit(sigma_true, q, T, sigma_claim, m, rng):
    signs = rng.choice([-1, 1], m)
    x = rng.normal(0, sigma_true, (T, m)) + (rng.random((T, m)) < q) * (signs > 0)
    r = one_run.audit(whitebox_lr.subsampled_gaussian_llr(x, q, sigma_claim), signs, m // 4, m // 4, 1e-5)
    return r


def test_claim_curve_test_keeps_its_level_and_catches_too_little_noise():
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.accounting.dpa_pld import privacy_profile

    q, T, sigma, m = 0.2, 40, 1.0, 400
    eps_grid = np.linspace(0, 20, 300)
    profile = (eps_grid, privacy_profile([SubsampledGaussian(q, sigma, T, "poisson")], eps_grid))
    rng = np.random.default_rng(11)
    honest = [_canary_audit(sigma, q, T, sigma, m, rng) for _ in range(150)]
    rejected = np.mean([fdp.rejects_profile(r.m, r.r, r.v, *profile) for r in honest])
    assert rejected <= 0.08
    broken = [_canary_audit(sigma / 4, q, T, sigma, m, rng) for _ in range(10)]
    assert all(fdp.rejects_profile(r.m, r.r, r.v, *profile) for r in broken)


def test_ideal_limit_of_the_demo_claim():
    lim = fdp.ideal_limit(1000, 250, 250, 8.0, 1e-5, sims=400)
    assert 1.6 < lim["mu"] < 1.7
    assert 2.0 < lim["epsilon_lb"] < 2.4 and 3.5 < lim["gdp_epsilon_estimate"] < 4.1


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="cannot exceed"):
        fdp.gdp_mu_lower_bound(10, 5, 6)
    with pytest.raises(ValueError, match="delta"):
        fdp.approx_dp_epsilon_lower_bound(10, 5, 5, 1.5)
