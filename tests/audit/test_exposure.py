"""Exposure on constructed log-perplexities."""

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.audit import exposure


def test_rank_exposure_extremes():
    refs = np.arange(1, 1024)  # 1023 references with log-perplexities 1..1023
    e = exposure.rank_exposure([0.5, 1023.5, 512.0], refs)
    assert e[0] == pytest.approx(10.0)  # rank 1 among 1024 -> log2(1024)
    assert e[1] == pytest.approx(0.0)  # worse than every reference -> rank 1024
    assert e[2] == pytest.approx(10 - np.log2(1 + 511 + 0.5))  # one tie counts half


def test_held_out_exposure_is_about_one_bit_on_average():
    rng = np.random.default_rng(0)
    refs = rng.normal(size=5000)
    held_out = rng.normal(size=5000)
    # E[log2(N+1) - log2(U)] for U uniform on 1..N+1 is about log2(e) = 1.44
    assert exposure.rank_exposure(held_out, refs).mean() == pytest.approx(1.44, abs=0.1)


def test_extrapolation_matches_known_distribution():
    rng = np.random.default_rng(1)
    refs = rng.normal(50.0, 5.0, size=20000)
    x = 50.0 - 5.0 * 4  # four sigma below: beyond what 20000 samples can rank
    got = exposure.extrapolated_exposure([x], refs)[0]
    assert got == pytest.approx(-np.log2(norm.cdf(-4.0)), rel=0.1)
    assert got > np.log2(20001)  # exceeds the sampled cap


def test_exposure_epsilon_bound():
    # all 100 inserted canaries at exposure 10: P_in >= CP lower bound of 100/100 -> large eps
    e = exposure.epsilon_from_exposures(np.full(100, 10.0), threshold=10.0, delta=1e-5)
    assert e == pytest.approx(np.log((0.05 ** (1 / 100) - 1e-5) / 2 ** -10), rel=1e-3)
    # chance-level exposures give no bound
    rng = np.random.default_rng(2)
    chance = -np.log2(rng.random(1000))
    assert exposure.epsilon_from_exposures(chance, threshold=3.0, delta=1e-5) == 0.0
