"""Level tests that can fail: how many simulated bounds lie above the true epsilon, how many a 95% bound may put
there by chance, and the check that the same test fails a bound inflated by 10% (a test a wrong bound passes
proves nothing). Shared by the validity tests of tests/audit/."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom


def above(bounds, truth: float) -> int:
    return int(np.sum(np.asarray(bounds, dtype=float) > truth + 1e-9))


def allowed(runs: int, level: float = 0.05, false_fail: float = 0.01) -> int:
    """The most bounds above the truth a valid 95% bound gives in ``runs`` audits, but with probability
    ``false_fail``: the (1 - false_fail) quantile of Bin(runs, level)."""
    return int(binom.ppf(1.0 - false_fail, runs, level))


def detectable_inflation(bounds, truth: float, runs: int) -> float:
    """The smallest factor by which every bound must be multiplied for this level test to fail."""
    b = np.sort(np.asarray(bounds, dtype=float))[::-1]
    k = allowed(runs)
    return float("inf") if k >= b.size or b[k] <= 0 else float(truth / b[k])


def assert_valid_and_sharp(bounds, truth: float, runs: int | None = None, inflate: float = 1.10) -> None:
    """Valid (at most :func:`allowed` bounds above the truth) and sharp: the same test fails the bounds times
    ``inflate`` (the mutation check)."""
    runs = len(bounds) if runs is None else runs
    k = allowed(runs)
    got = above(bounds, truth)
    assert got <= k, f"{got} of {runs} bounds above the true epsilon {truth:.4g} (a valid 95% bound: at most {k})"
    inflated = above(inflate * np.asarray(bounds, dtype=float), truth)
    assert inflated > k, (f"bounds inflated by {inflate - 1:.0%} pass this test too ({inflated} above the truth, "
                          f"at most {k} allowed): it cannot tell a valid bound from a wrong one")
