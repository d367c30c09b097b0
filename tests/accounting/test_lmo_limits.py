"""The floors of the sound methods for LMO-DP's d-dimensional mechanism (dpaudit.accounting.lmo_limits): the
median-test constant against the exact CDF of the noise, the Laplace case in closed form, and the committed
epsilon = 0.3 card, whose claim sits between the dense-limit estimate and every floor."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.accounting import lmo_limits, lmo_pld
from dpaudit.accounting.lmo_noise import LmoNoise

ROOT = Path(__file__).resolve().parents[2]
BRIEF = LmoNoise(0.3, 0.2, 0.5, 2.0, 0.5, 5.0, 0.5, 1.5)


def _median_test_mu(noise, s):
    """The smallest mu with G_mu below the exact tradeoff of (f, f(. - s)) at the test 'x > s / 2'."""
    log_cdf = lmo_pld._log_cdf(noise, np.array([-s / 2]))[0]
    alpha = beta = math.exp(log_cdf)  # Q(X > s/2) = F(-s/2) by symmetry; P(X <= s/2) = F(-s/2)
    return norm.ppf(1 - alpha) - norm.ppf(beta)


@pytest.mark.parametrize("noise", [BRIEF, LmoNoise(0, 0, 1.0, u_low=2.0, u_high=2.0 * (1 + 1e-7))])
def test_the_median_test_forces_the_constant_f0_sqrt_2pi(noise):
    C = 0.1
    c = 1 / (C * lmo_limits.median_test_multiplier(noise, C))  # per unit shift
    for s in (1e-3, 1e-4):
        assert _median_test_mu(noise, s) / s == pytest.approx(c, rel=1e-3)


def test_laplace_closed_forms():
    y0, C = 2.0, 0.1
    lap = LmoNoise(0, 0, 1.0, u_low=y0, u_high=y0 * (1 + 1e-7))
    assert lmo_limits.fisher_multiplier(lap, C) == pytest.approx(1 / (C * y0), rel=1e-6)
    # a Gaussian domination of Laplace needs sqrt(pi / 2) = 1.2533 times its Fisher constant
    assert lmo_limits.fisher_multiplier(lap, C) / lmo_limits.median_test_multiplier(lap, C) == pytest.approx(
        math.sqrt(math.pi / 2), rel=1e-6)


def test_the_committed_epsilon_0p3_claim_sits_between_the_estimate_and_every_floor():
    card = json.loads((ROOT / "reports/lmo_dp/lmo-eps0p3/checkpoint/privacy_card.json").read_text())
    ev, claim = card["mechanism"]["events"][0], card["claim"]["epsilon"]
    got = lmo_limits.limits(ev, card["claim"]["delta"])
    assert got["dense_limit_estimate"] == pytest.approx(0.2829, abs=5e-4)
    assert got["rdp_floor"] == pytest.approx(0.3088, abs=5e-4)
    assert got["gdp_floor"] == pytest.approx(0.3756, abs=5e-4)
    assert got["dense_limit_estimate"] < claim < min(got["rdp_floor"], got["gdp_floor"])
    # RDP's conversion never beats the PLD of the same Gaussian
    assert got["rdp_floor"] > got["dense_limit_estimate"]


def test_at_the_papers_epsilon_0p16_a_gaussian_domination_could_settle_the_claim():
    card = json.loads((ROOT / "reports/lmo_dp/lmo-eps0p16/checkpoint/privacy_card.json").read_text())
    got = lmo_limits.limits(card["mechanism"]["events"][0], card["claim"]["delta"])
    assert got["dense_limit_estimate"] < got["rdp_floor"] < got["gdp_floor"] < card["claim"]["epsilon"]
