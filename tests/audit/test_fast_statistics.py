"""The fast one-run statistics give the slow ones' answers (issue wave 5 · 5/5, item 2): the f-DP recursion solved
piece by piece equals the step-by-step recursion curve by curve, Brent's root of Steinke et al.'s p-value is the
bisection's, and one sort serves every guess count of the held-out and search strategies."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.audit import auditor, fdp, fdp_pieces, one_run


def _stepwise(eps, delta, m, r, v, confidence, value=False):
    """The definition: the recursion of dpaudit.audit.fdp run to j = 0 for every curve, no pruning (``value``:
    rr_0 + h_0 instead of the decision)."""
    finv = fdp.approx_dp_finv(eps, delta)
    thr = (1.0 - confidence) * r / m
    rr, h = np.full(len(eps), thr * v / r), np.full(len(eps), thr * (r - v) / r)
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, finv(rr))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h if value else rr + h > r / m + 1e-12


def _cases(n, seed=7):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        m = int(rng.choice([10, 100, 1000, 10_000, 100_000]))
        r = int(rng.integers(1, min(m, 1500) + 1))
        yield m, r, int(rng.integers(1, r + 1)), float(rng.choice([0.0, 1e-5, 1e-3, 0.1])), \
            float(rng.choice([0.9, 0.95, 0.99]))


@pytest.mark.parametrize("m,r,v,delta,confidence", [*_cases(60), (1000, 1000, 1000, 1e-5, 0.95),
                                                      (100, 100, 1, 0.0, 0.95), (10, 10, 10, 0.0, 0.5),
                                                      (10_000, 2, 2, 1e-5, 0.95), (500, 250, 250, 0.1, 0.99)])
def test_the_piecewise_recursion_decides_every_curve_as_the_stepwise_one(m, r, v, delta, confidence):
    eps = np.linspace(0.0, 14.0, 57)
    steps = fdp_pieces._Steps(m, r, v, confidence)
    pieces = [fdp_pieces.rejects(steps, fdp_pieces._Curve(float(e), delta)) for e in eps]
    np.testing.assert_array_equal(pieces, _stepwise(eps, delta, m, r, v, confidence))
    # the value itself, not only the side of the limit it falls on (run to the end: no early stop)
    values = [fdp_pieces.final(steps, fdp_pieces._Curve(float(e), delta), stop=np.inf) for e in eps]
    np.testing.assert_allclose(values, _stepwise(eps, delta, m, r, v, confidence, value=True), rtol=1e-9, atol=1e-15)


def test_the_bound_is_the_largest_rejected_grid_value():
    """Against the generic search over the grid with the step-by-step recursion (dpaudit.audit.fdp)."""
    for m, r, v, delta, conf in _cases(12, seed=3):
        slow = fdp._largest_rejected(fdp.EPS_GRID, lambda e, d=delta: fdp.approx_dp_finv(e, d), m, r, v, conf)
        assert fdp_pieces.epsilon_lower_bound(fdp.EPS_GRID, m, r, v, delta, conf) == slow


@pytest.mark.parametrize("m,r,v,delta", [(1000, 500, 400, 1e-5), (10_000, 2000, 1500, 0.0), (100, 50, 49, 1e-3),
                                         (100_000, 20_000, 11_000, 1e-5)])
def test_steinke_bound_is_the_root_of_its_p_value(m, r, v, delta):
    """Rejected at the bound, not rejected 1e-9 above it: the bound is the root within 1e-9, on its safe side."""
    one_run.epsilon_lower_bound.cache_clear()
    eps = one_run.epsilon_lower_bound(m, r, v, delta)
    assert eps > 0
    assert one_run.p_value(m, r, v, eps, delta) < 0.05 <= one_run.p_value(m, r, v, eps + 1e-9, delta)


def test_one_sort_counts_the_same_right_guesses_as_each_guess_from_scores():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=301).astype(float)  # heavy ties: the index order must break them
    signs = rng.choice([-1, 1], size=301)
    a = auditor.ScoreAuditor(scores, signs)
    counts = auditor._RightCounts(a.scores, a.signs)
    for kp, kn in [(0, 1), (1, 0), (10, 20), (150, 151), (0, 301), (301, 0), (77, 3)]:
        assert counts(kp, kn) == a.right(kp, kn)


@pytest.mark.parametrize("n_in,n_out,decimals", [(50, 70, 1), (400, 300, None), (1, 5, None), (2000, 1500, 0)])
def test_the_auc_bootstrap_without_sorting_equals_ranking_every_resample(n_in, n_out, decimals):
    from dpaudit.audit import mia_metrics

    rng = np.random.default_rng(n_in)
    ins, outs = rng.normal(size=n_in), rng.normal(size=n_out) + 0.3
    if decimals is not None:  # ties across and within the groups
        ins, outs = ins.round(decimals), outs.round(decimals)
    ins[0] = np.inf  # a log-probability that underflowed ranks above everything
    fast = mia_metrics.auc_interval(ins, outs, 300, 0.95, seed=4)
    assert fast == mia_metrics._auc_interval_by_ranks(ins, outs, 300, 0.95, seed=4)  # to the last bit
