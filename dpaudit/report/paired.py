"""Paired comparison of two models' accuracy on the same test examples.

Two models scored on the same examples give paired outcomes; only the examples where they disagree carry
information about which is better. The test is McNemar's exact test: under "equally accurate" each discordant
example favours A or B with probability 1/2, so the count favouring A is Binomial(b + c, 1/2) (two-sided p, the
value of ``scipy.stats.binomtest``, computed here with the standard library so that ``dpaudit compare`` runs in the
gate's install, which has no SciPy; tests/report/test_paired.py holds the two equal). The effect size is the
difference of accuracies with a paired bootstrap interval
(examples resampled with their pair of outcomes, percentile interval, seeded, so a report regenerates). The
reading follows the test: "higher"/"lower" when p < 1 − confidence, else "cannot be resolved". Newcombe's unpaired
interval (dpaudit/report/table.py) ignores the pairing and is conservative; it remains for reports that predate
per-example outcomes.

A report's ``metrics.correct`` holds its per-example outcomes as a string of "0"/"1" in test order, and
``metrics.test_fingerprint`` the hash of those examples: two reports pair only when both match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpaudit.errors import DpauditError

BOOTSTRAP = 10_000
SEED = 20261125


@dataclass(frozen=True)
class Paired:
    difference: float  # accuracy of A minus accuracy of B
    low: float
    high: float
    a_only: int  # examples A gets right and B wrong
    b_only: int
    p_value: float  # McNemar, exact, two-sided
    n: int

    def reading(self, confidence: float = 0.95) -> str:
        if self.p_value < 1 - confidence:
            return "higher" if self.difference > 0 else "lower"
        return "cannot be resolved"


def encode(correct) -> str:
    """Per-example outcomes (booleans) as the report's string of 0/1."""
    return "".join("1" if bool(c) else "0" for c in correct)


def decode(s: str) -> np.ndarray:
    if not isinstance(s, str) or set(s) - {"0", "1"}:
        raise DpauditError("metrics.correct must be a string of 0 and 1 (one per test example)")
    return np.frombuffer(s.encode(), dtype=np.uint8) == ord("1")


def can_pair(ma: dict, mb: dict) -> bool:
    """Whether two reports' metrics carry outcomes on the same test examples."""
    return (bool(ma.get("correct")) and bool(mb.get("correct")) and ma.get("test_fingerprint") is not None
            and ma.get("test_fingerprint") == mb.get("test_fingerprint") and len(ma["correct"]) == len(mb["correct"]))


def mcnemar_p(a_only: int, b_only: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts: 2 P[X <= min(a, b)] for X ~ Binomial(a + b, 1/2),
    at most 1 (the binomial is symmetric, so this is the two-sided test's sum over outcomes no likelier than the one
    seen). The tail is summed from its largest term down in log space, stopping once a term no longer changes it."""
    n, k = a_only + b_only, min(a_only, b_only)
    if n == 0 or 2 * k == n:
        return 1.0
    log_top = math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) - n * math.log(2)  # log P[X = k]
    total, term, i = 1.0, 1.0, k
    while i > 0:
        term *= i / (n - i + 1)  # P[X = i - 1] / P[X = k]
        total += term
        if term < 1e-17 * total:
            break
        i -= 1
    return min(1.0, 2.0 * math.exp(log_top + math.log(total)))


def compare(a, b, confidence: float = 0.95, resamples: int = BOOTSTRAP, seed: int = SEED) -> Paired:
    """A − B on paired outcomes ``a`` and ``b`` (0/1 strings or boolean arrays of equal length)."""
    x = decode(a) if isinstance(a, str) else np.asarray(a, dtype=bool)
    y = decode(b) if isinstance(b, str) else np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise DpauditError("paired comparison needs two outcome vectors of the same, non-zero length")
    d = x.astype(np.int8) - y.astype(np.int8)
    n = d.size
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 5_000_000 // n)
    for s in range(0, resamples, chunk):
        k = min(chunk, resamples - s)
        means[s:s + k] = d[rng.integers(0, n, size=(k, n))].mean(axis=1)
    alpha = 1 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    a_only, b_only = int((d == 1).sum()), int((d == -1).sum())
    return Paired(float(d.mean()), float(lo), float(hi), a_only, b_only, mcnemar_p(a_only, b_only), n)
