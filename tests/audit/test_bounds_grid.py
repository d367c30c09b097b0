"""The one-run bounds stay what they were before they were made fast (issue wave 5 · 5/5): Steinke et al.'s bound,
the f-DP (eps, delta) bound and the mu-GDP bound on a committed grid of counts (m = 100 to 10^5, written by
scripts/bounds_grid.py with the full recursion and SciPy's binomial at every bisection step), within 1e-9; and the
pruned f-DP recursion equals the full one curve by curve, on families where curves are decided early and late."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import fdp, one_run

GRID = json.loads((Path(__file__).parent / "data" / "bounds_grid.json").read_text())["rows"]


@pytest.mark.parametrize("row", GRID, ids=[f"m{x['m']}-r{x['r']}-v{x['v']}-d{x['delta']:g}" for x in GRID])
def test_every_bound_equals_the_committed_grid(row):
    m, r, v, delta, conf = row["m"], row["r"], row["v"], row["delta"], row["confidence"]
    assert one_run.epsilon_lower_bound(m, r, v, delta, conf) == pytest.approx(row["steinke"], abs=1e-9)
    assert fdp.approx_dp_epsilon_lower_bound(m, r, v, delta, conf) == pytest.approx(row["fdp_epsilon"], abs=1e-9)
    assert fdp.gdp_mu_lower_bound(m, r, v, conf) == pytest.approx(row["gdp_mu"], abs=1e-9)


def _full(finv, m, r, v, confidence=0.95):
    """The recursion run to j = 0 for every curve (no pruning): the definition."""
    tau = 1.0 - confidence
    thr = tau * r / m
    n = np.asarray(finv(np.zeros(1))).size
    rr, h = np.full(n, thr * v / r), np.full(n, thr * (r - v) / r)
    for i in range(v - 1, -1, -1):
        h_new = np.maximum(h, np.asarray(finv(rr)))
        rr = rr + (i / (r - i)) * (h_new - h)
        h = h_new
    return rr + h > r / m + 1e-12


@pytest.mark.parametrize("m,r,v", [(1000, 200, 150), (10_000, 400, 260), (10_000, 2000, 2000), (500, 100, 55)])
def test_the_pruned_recursion_equals_the_full_one_curve_by_curve(m, r, v):
    for finv in (fdp.gdp_finv(np.linspace(0, 6, 301)), fdp.approx_dp_finv(np.linspace(0, 12, 301), 1e-5),
                 fdp.approx_dp_finv(np.linspace(0, 12, 301), 0.0)):
        np.testing.assert_array_equal(fdp.rejects(finv, m, r, v), _full(finv, m, r, v))
