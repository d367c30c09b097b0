"""Paired accuracy comparisons (dpaudit/report/paired.py): McNemar's exact p from the discordant pairs, checked against
the binomial sum written out; valid at 5% on simulated equally accurate models; it finds a real difference the
unpaired Newcombe interval cannot resolve; the bootstrap interval covers the true difference; `dpaudit table
--differences` and `dpaudit compare` use it when both reports carry outcomes on the same examples."""

import math

import numpy as np
import pytest

from dpaudit.errors import DpauditError
from dpaudit.report import paired, table


def _mcnemar_by_hand(b: int, c: int) -> float:
    n, k = b + c, min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


@pytest.mark.parametrize("b,c", [(0, 0), (5, 0), (31, 5), (12, 14), (40, 60)])
def test_mcnemar_is_the_exact_binomial_tail(b, c):
    assert paired.mcnemar_p(b, c) == pytest.approx(_mcnemar_by_hand(b, c), rel=1e-9, abs=1e-12)


def test_mcnemar_equals_scipys_binomtest_from_small_to_large_counts():
    """The standard-library tail (the gate's install has no SciPy) against scipy.stats.binomtest, the test it stands
    for, on ties, one-sided extremes, p near 1 and counts too large for the binomial sum above."""
    from scipy.stats import binomtest

    cases = [(1, 0), (0, 7), (3, 4), (50, 50), (49, 51), (0, 2000), (990, 1010), (4_800, 5_200), (30_000, 31_000),
             (123_456, 124_000), (2, 300_000)]
    rng = np.random.default_rng(1)
    cases += [tuple(int(x) for x in rng.integers(0, 5_000, size=2)) for _ in range(40)]
    for b, c in cases:
        want = 1.0 if b + c == 0 else binomtest(b, b + c, 0.5).pvalue
        assert paired.mcnemar_p(b, c) == pytest.approx(want, rel=1e-9, abs=1e-300), (b, c)


def _pairs(rng, n, pa, pb, rho):
    """Outcomes of two models on n examples: accuracies pa, pb, correlated through a shared difficulty."""
    z = rng.random(n)
    a = (z < pa) if rho else rng.random(n) < pa
    b = (np.where(rng.random(n) < rho, z, rng.random(n)) < pb)
    return a, b


def test_valid_at_5_percent_on_equally_accurate_models():
    rng = np.random.default_rng(0)
    rejections = sum(paired.compare(*_pairs(rng, 500, 0.7, 0.7, 0.8), resamples=200).reading() != "cannot be resolved"
                     for _ in range(400))
    # exact McNemar is conservative: at most 5% plus binomial slack (400 trials: 3 sd ~ 3.3%)
    assert rejections / 400 <= 0.05 + 0.033, rejections


def test_finds_a_difference_newcombe_cannot_and_the_interval_covers_it():
    rng = np.random.default_rng(1)
    found = covered = 0
    for _ in range(100):
        a, b = _pairs(rng, 500, 0.74, 0.70, 0.9)  # true difference +0.04, strongly paired
        c = paired.compare(a, b, resamples=1000)
        found += c.reading() == "higher"
        covered += c.low <= 0.04 <= c.high
        lo, hi = table.newcombe(a.mean(), 500, b.mean(), 500)
        assert lo < 0 < hi or lo > 0  # Newcombe rarely resolves +0.04 at n = 500
    assert found >= 60 and covered >= 90, (found, covered)


def test_encoding_and_refusals():
    assert paired.encode([True, False, True]) == "101"
    assert paired.decode("101").tolist() == [True, False, True]
    with pytest.raises(DpauditError, match="string of 0 and 1"):
        paired.decode("10x")
    with pytest.raises(DpauditError, match="same, non-zero length"):
        paired.compare("10", "101")
    m = {"correct": "1010", "test_fingerprint": "abc"}
    assert paired.can_pair(m, dict(m)) and not paired.can_pair(m, {**m, "test_fingerprint": "abd"})
    assert not paired.can_pair(m, {"accuracy": 0.5})


def _report(correct: str, fp: str = "f") -> dict:
    return {"kind": "evaluation", "checkpoint": {"variant": "v"}, "claim": {"epsilon": 3.0},
            "accounting": {"reaccounted_epsilon": 3.0}, "empirical_best": None,
            "verdict": {"status": "consistent"}, "attacks": {}, "exposure": {},
            "metrics": {"accuracy": correct.count("1") / len(correct), "n_test": len(correct), "correct": correct,
                        "test_fingerprint": fp}}


def test_compare_flags_accuracy_only_when_mcnemar_does():
    from dpaudit.gate import compare

    old = "1" * 400 + "0" * 100
    slightly = "0" * 3 + "1" * 397 + "0" * 100  # 3 fewer right: not a significant drop
    much = "0" * 40 + "1" * 360 + "0" * 100  # 40 fewer right: McNemar p ~ 1e-12
    text, n = compare.compare(_report(old), _report(slightly))
    assert n == 0 and "paired on the same 500 test examples" in text and "cannot be resolved" in text
    text, n = compare.compare(_report(old), _report(much))
    assert n == 1 and "| lower |" in text
    text, n = compare.compare(_report(old), _report(slightly, fp="other"))  # other examples: Newcombe, unpaired
    assert n == 0 and "paired" not in text and "| Newcombe 95% | not shown to be lower |" in text
    text, n = compare.compare(_report(old), _report(much, fp="other"))  # 0.80 -> 0.72 of 500: outside the interval
    assert n == 1 and "| Newcombe 95% | **regressed** |" in text


def test_sentiment_metrics_carry_the_outcomes_accuracy_averages(tiny_model_factory):
    from dpaudit.tasks import sentiment

    model, tok = tiny_model_factory()
    test = sentiment.load(n_train=20, n_test=40).test
    m = sentiment.metrics(model, tok, test, batch_size=16, max_len=32)
    assert len(m["correct"]) == 40 and m["accuracy"] == m["correct"].count("1") / 40
    assert m["correct"] == paired.encode(sentiment.outcomes(model, tok, test, batch_size=7, max_len=32))
    assert m["test_fingerprint"] == sentiment.metrics(model, tok, list(test), 16, 32)["test_fingerprint"]
