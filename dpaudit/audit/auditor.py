"""Scores in, every bound out: the public one-run auditor of membership scores (or of counts).

    >>> import numpy as np
    >>> from dpaudit.audit.auditor import ScoreAuditor, Fixed, HeldOut
    >>> rng = np.random.default_rng(0)
    >>> signs = rng.choice([-1, 1], size=1000)
    >>> scores = rng.normal(size=1000) + 2.0 * (signs > 0)       # a 2-GDP mechanism's optimal scores
    >>> a = ScoreAuditor(scores, signs)
    >>> r = a.audit(Fixed(k_pos=100, k_neg=100), delta=1e-5)
    >>> round(r.epsilon_lb, 2) > 0
    True

The canaries were each inserted with probability 1/2 (``signs`` +1) or held out (-1). How the guesses are made is
a value (the *threshold strategy*), each valid at the stated confidence:

* :class:`Fixed` — k_pos + k_neg guesses fixed before the scores are seen (dpaudit's manifests fix them);
* :class:`HeldOut` — the canaries split in two by a seeded coin; the guess counts chosen on one half, audited on the
  other (half the canaries, full confidence);
* :class:`Search` — every configuration of a grid audited, Bonferroni over the grid's size (the correction), the
  best kept;
* :class:`MedianOfSplits` — HeldOut over many seeded splits, each at confidence 1 - alpha/2; their median is valid
  at 1 - alpha (the splits whose bound exceeds the truth are, on average, at most alpha/2 of them, so by Markov's
  inequality at least half of them do with probability at most alpha).

Every bound is the f-DP analysis of the guesses (:mod:`dpaudit.audit.fdp`, Mahloujifar et al. 2024) beside the
Steinke et al. one (:mod:`dpaudit.audit.one_run`); the Gaussian-DP reading is an *estimate* (it assumes the
mechanism's trade-off is Gaussian) and is labelled so. TPR at a chosen FPR comes with Clopper-Pearson intervals
(the threshold is set on the held-out scores, so the TPR of the inserted ones at it is binomial), AUC with a
bootstrap interval. :meth:`ScoreAuditor.two_sample` is the test past thresholding for independent canaries. Pure
NumPy/SciPy. (Over 300 lines: the four strategies and the readings of one set of scores belong to one object.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.stats import beta

from dpaudit.audit import fdp, mia_metrics, one_run

GRID = (0.05, 0.1, 0.2, 0.3, 0.5)  # HeldOut: fractions of the tuning canaries guessed on each side


@dataclass(frozen=True)
class Fixed:
    """k_pos "inserted" and k_neg "held out" guesses, fixed before any score is seen."""

    k_pos: int
    k_neg: int

    def describe(self) -> str:
        return f"fixed guesses {self.k_pos} + {self.k_neg}"


@dataclass(frozen=True)
class HeldOut:
    """Guess fractions chosen (from ``grid`` x ``grid``) on a seeded half of the canaries, audited on the other."""

    grid: tuple = GRID
    seed: int = 0

    def describe(self) -> str:
        return f"held-out split (seed {self.seed}): guesses chosen on half the canaries, audited on the other half"


@dataclass(frozen=True)
class Search:
    """Every (k_pos, k_neg) with each side in {0} or a geometric grid of counts (1, 2, 4, ..., m/2), both not 0,
    audited at 1 - alpha / (number of configurations); the largest bound is valid at 1 - alpha."""

    def configurations(self, m: int) -> list[tuple[int, int]]:
        ks = [0] + [2 ** i for i in range(int(math.log2(max(1, m // 2))) + 1)]
        return [(a, b) for a in ks for b in ks if 0 < a + b <= m]

    def describe(self) -> str:
        return "search over a geometric grid of guess counts, Bonferroni over the grid"


@dataclass(frozen=True)
class MedianOfSplits:
    """The median of ``splits`` HeldOut bounds (seeds 0..splits-1), each at confidence 1 - alpha/2."""

    splits: int = 11
    grid: tuple = GRID

    def describe(self) -> str:
        return f"median over {self.splits} held-out splits, each at 1 - alpha/2 (valid at 1 - alpha by Markov)"


STRATEGIES = {"fixed": Fixed, "held-out": HeldOut, "search": Search, "median": MedianOfSplits}


@dataclass(frozen=True)
class AuditResult:
    """One audit's bounds. ``epsilon_lb`` and ``ceiling`` (the most these guesses could show) are f-DP lower bounds
    at ``confidence``; ``steinke_epsilon_lb`` the Steinke et al. bound of the same guesses; ``gdp_epsilon_estimate``
    an estimate (assumes a Gaussian trade-off), never a bound. ``m``, ``r``, ``v``: the canaries the audit used,
    its guesses and the right ones (for MedianOfSplits, the median split's)."""

    strategy: str
    epsilon_lb: float
    ceiling: float
    steinke_epsilon_lb: float
    steinke_ceiling: float
    gdp_mu_lb: float
    gdp_epsilon_estimate: float | None
    m: int
    k_pos: int
    k_neg: int
    r: int
    v: int
    delta: float
    confidence: float
    group_size: int = 1
    estimates: tuple = ("gdp_epsilon_estimate",)
    splits: list = field(default_factory=list)  # MedianOfSplits: every split's epsilon_lb

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Rate:
    """A rate with its two-sided Clopper-Pearson interval at ``confidence``."""

    value: float
    low: float
    high: float
    successes: int | None  # None: not a binomial count (the AUC's bootstrap interval)
    trials: int | None
    confidence: float


def bounds_from_counts(m: int, k_pos: int, k_neg: int, v: int, delta: float, confidence: float = 0.95,
                       strategy: str = "fixed guesses (counts given)", group_size: int = 1) -> AuditResult:
    """Every bound of ``v`` right out of ``k_pos + k_neg`` guesses on ``m`` canaries.

    Args:
        m: Canaries, each inserted or held out by a fair coin.
        k_pos: Guesses "inserted", fixed before the scores were read.
        k_neg: Guesses "held out".
        v: Right guesses.
        delta: The δ of the (ε, δ) bound.
        confidence: Of every bound (0.95: a bound above the true ε in at most 5% of audits).
        strategy: How the guesses were fixed, recorded in the result.
        group_size: c > 1 when each canary was inserted c times: the ε values are then the record level's, the
            group's divided by c (``delta`` must then be the group's).

    Returns:
        The :class:`AuditResult`: f-DP and Steinke et al.'s ε lower bounds, each beside its ceiling (the most
        these guesses could show), and the Gaussian-DP reading.

    Raises:
        ValueError: A group size below 1.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    r = int(k_pos + k_neg)
    f = fdp.audit(v, m, k_pos, k_neg, delta, confidence, group_size)
    st = one_run.epsilon_lower_bound(m, r, v, delta=delta, confidence=confidence) / group_size
    st_cap = one_run.ceiling(m, r, delta=delta, confidence=confidence) / group_size
    return AuditResult(strategy=strategy, epsilon_lb=f.epsilon_lb, ceiling=f.ceiling, steinke_epsilon_lb=st,
                       steinke_ceiling=st_cap,
                       gdp_mu_lb=f.gdp_mu_lb, gdp_epsilon_estimate=f.gdp_epsilon_estimate, m=int(m),
                       k_pos=int(k_pos), k_neg=int(k_neg), r=r, v=int(v), delta=float(delta),
                       confidence=float(confidence), group_size=int(group_size))


FAIR_COIN_P = 1e-3  # a membership split less likely than this under a fair coin is refused (as `audit split` does)


def fair_coin_p(n_in: int, n_out: int) -> float:
    """Two-sided exact binomial p-value of ``n_in`` inserted out of ``n_in + n_out`` under a fair coin.

    Args:
        n_in: Canaries (or records) inserted.
        n_out: Canaries held out.

    Returns:
        The p-value (1.0 for no canaries).
    """
    from scipy.stats import binomtest

    return float(binomtest(n_in, n_in + n_out, 0.5).pvalue) if n_in + n_out else 1.0


def check_fair_coins(signs) -> None:
    """Refuse a membership a fair coin gives with probability below :data:`FAIR_COIN_P`: the one-run analysis needs
    every canary inserted by an independent fair coin, and a lopsided split lets uninformative scores show a bound
    (the prior alone makes the majority guess right).

    Args:
        signs: +1 inserted, -1 held out, one per canary.

    Raises:
        ValueError: The two-sided exact binomial p-value of the inserted count is below :data:`FAIR_COIN_P`.
    """
    s = np.asarray(signs)
    n_in, m = int((s > 0).sum()), int(s.size)
    p = fair_coin_p(n_in, m - n_in)
    if p < FAIR_COIN_P:
        raise ValueError(f"{n_in} of {m} canaries inserted: a fair coin gives a split this uneven with probability "
                         f"{p:.1g}, and the one-run bound holds only for canaries each inserted by an independent "
                         "fair coin; insert each canary by a coin before training (dpaudit canaries new), or use "
                         "--strategy two-sample, whose rates do not rest on the balance")


class ScoreAuditor:
    """Audits of membership scores: the one-run bounds (:meth:`audit`), TPR at a low FPR and the AUC, each with its
    interval.

    Args:
        scores: One score per canary, higher = more likely inserted.
        signs: +1 inserted, -1 held out (or booleans), one per canary; :meth:`from_groups` takes the inserted and
            held-out scores apart instead.
        fair_coins_checked: False (the default for membership you bring): :meth:`audit` refuses a membership a
            fair coin rarely gives (two-sided exact binomial p below :data:`FAIR_COIN_P`). The one-run bounds hold
            only for canaries each inserted by an independent fair coin: with 950 of 1,000 inserted, uninformative
            scores showed ε ≥ 2.0 (search), 1.5 (held-out, median), since guessing "inserted" is then right 95% of
            the time. dpaudit's own manifests, whose coins it draws, pass True.

    Raises:
        ValueError: Lengths that differ, a NaN score, or fewer than two canaries.
    """

    def __init__(self, scores, signs, fair_coins_checked: bool = False):
        self.fair_coins_checked = bool(fair_coins_checked)
        self.scores = np.asarray(scores, dtype=float)
        self.signs = one_run._as_signs(signs)
        if self.scores.ndim != 1 or self.scores.size != self.signs.size:
            raise ValueError(f"{self.scores.size} scores but {self.signs.size} signs: one of each per canary")
        if np.isnan(self.scores).any():  # +-inf ranks (a log-probability that underflowed); NaN does not
            raise ValueError("membership scores contain NaN (not finite): fix the attack before auditing")
        if self.scores.size < 2:
            raise ValueError("an audit needs at least two canaries")

    @classmethod
    def from_groups(cls, inserted, held_out) -> ScoreAuditor:
        """Scores of the inserted canaries and of the held-out ones (each in with probability 1/2)."""
        ins, out = np.asarray(inserted, dtype=float).ravel(), np.asarray(held_out, dtype=float).ravel()
        return cls(np.r_[ins, out], np.r_[np.ones(ins.size, dtype=int), -np.ones(out.size, dtype=int)])

    @property
    def m(self) -> int:
        return int(self.scores.size)

    def audit(self, strategy=None, delta: float = 0.0, confidence: float = 0.95, group_size: int = 1) -> AuditResult:
        """The one-run audit of these scores.

        Args:
            strategy: How the guesses are chosen, fixed before the scores are read: :class:`Fixed` (default: m/4
                + m/4, dpaudit's manifests' default), :class:`HeldOut`, :class:`Search` (every configuration at a
                Bonferroni-corrected level) or :class:`MedianOfSplits`.
            delta: The δ of the (ε, δ) bound.
            confidence: Of the bound.
            group_size: As in :func:`bounds_from_counts`.

        Returns:
            The :class:`AuditResult`.

        Raises:
            ValueError: A confidence outside (0, 1), a δ outside [0, 1), or an unknown strategy.
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be in (0, 1), got {confidence}")
        if not 0.0 <= delta < 1.0:
            raise ValueError(f"delta must be in [0, 1), got {delta}")
        if not self.fair_coins_checked:
            check_fair_coins(self.signs)
        strategy = strategy if strategy is not None else Fixed(self.m // 4, self.m // 4)
        if isinstance(strategy, Fixed):
            return self._fixed(strategy.k_pos, strategy.k_neg, delta, confidence, strategy.describe(),
                               group_size=group_size)
        if isinstance(strategy, HeldOut):
            return self._held_out(strategy.grid, strategy.seed, delta, confidence, strategy.describe(), group_size)
        if isinstance(strategy, Search):
            configs = strategy.configurations(self.m)
            per = 1 - (1 - confidence) / len(configs)  # every configuration at this level: the max is valid
            right = _RightCounts(self.scores, self.signs)
            kp, kn = max(configs, key=lambda c: fdp.approx_dp_epsilon_lower_bound(self.m, c[0] + c[1],
                                                                                   right(*c), delta, per))
            best = self._fixed(kp, kn, delta, per, "", group_size=group_size)
            return _relabel(best, f"{strategy.describe()} ({len(configs)} configurations)", confidence)
        if isinstance(strategy, MedianOfSplits):
            if strategy.splits < 1:
                raise ValueError("MedianOfSplits needs at least one split")
            half = 1 - (1 - confidence) / 2
            runs = sorted((self._held_out(strategy.grid, s, delta, half, "", group_size)
                           for s in range(strategy.splits)),
                          key=lambda x: x.epsilon_lb)
            lower_median = runs[(len(runs) - 1) // 2]  # the lower median: never above the median
            out = _relabel(lower_median, strategy.describe(), confidence)
            return AuditResult(**{**out.to_dict(), "splits": [x.epsilon_lb for x in runs]})
        raise ValueError(f"unknown threshold strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")

    def two_sample(self, delta: float = 0.0, confidence: float = 0.95, threshold: float | None = None, seed: int = 0):
        """Past thresholding at k guesses: the two-sample threshold test (:mod:`dpaudit.audit.two_sample`), valid when
        the canaries' scores are independent (white-box Dirac canaries); at ``threshold`` fixed in advance (e.g.
        :func:`dpaudit.audit.two_sample.plan`'s), else tuned on a seeded half and tested on the other."""
        from dpaudit.audit import two_sample

        ins, out = self.scores[self.signs > 0], self.scores[self.signs < 0]
        if threshold is None:
            return two_sample.tuned(ins, out, delta, confidence, seed=seed)
        return two_sample.bound_at(ins, out, threshold, delta, confidence)

    def tpr_at_fpr(self, fpr: float, confidence: float = 0.95) -> tuple[Rate, Rate]:
        """(TPR, achieved FPR) at the threshold that flags at most ``fpr`` of the held-out canaries, each with its
        Clopper-Pearson interval. Where the held-out canaries cannot resolve ``fpr`` (fewer than 1/fpr of them),
        the threshold flags none of them: the TPR at zero false positives."""
        if not 0.0 < fpr < 1.0:
            raise ValueError(f"fpr must be in (0, 1), got {fpr}")
        ins, out = self.scores[self.signs > 0], self.scores[self.signs < 0]
        if ins.size == 0 or out.size == 0:
            raise ValueError("TPR at FPR needs inserted and held-out canaries")
        k = int(math.floor(fpr * out.size))  # held-out canaries allowed above the threshold
        srt = np.sort(out)[::-1]
        thr = srt[k] if k < out.size else -np.inf  # flag scores strictly above the (k+1)-th largest held-out one
        tp, fp = int(np.sum(ins > thr)), int(np.sum(out > thr))
        return _rate(tp, ins.size, confidence), _rate(fp, out.size, confidence)

    def auc(self, confidence: float = 0.95, n_boot: int = 1000, seed: int = 0) -> Rate:
        """AUC with a stratified bootstrap interval (counts are not binomial here: successes/trials are None)."""
        ins, out = self.scores[self.signs > 0], self.scores[self.signs < 0]
        if ins.size == 0 or out.size == 0:
            raise ValueError("the AUC needs inserted and held-out canaries")
        lo, hi = mia_metrics.auc_interval(ins, out, n_boot, confidence, seed)
        return Rate(mia_metrics.auc(ins, out), lo, hi, None, None, confidence)

    # -- strategies ----------------------------------------------------------------------------------------

    def right(self, k_pos: int, k_neg: int, idx: np.ndarray | None = None) -> int:
        """Right guesses of k_pos + k_neg fixed guesses (on the canaries ``idx``, default all)."""
        sc, s = (self.scores, self.signs) if idx is None else (self.scores[idx], self.signs[idx])
        return int(np.sum(np.maximum(0, one_run.guess_from_scores(sc, k_pos, k_neg) * s)))

    def split(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(tuning, audited) canary indices of a held-out split: a seeded coin, never the scores."""
        perm = np.random.default_rng([seed, 4242]).permutation(self.m)
        return np.sort(perm[: self.m // 2]), np.sort(perm[self.m // 2:])

    def tune(self, idx: np.ndarray, grid, delta: float, confidence: float) -> tuple[tuple, float, float] | None:
        """((Steinke bound, -(fractions)), fp, fn): the guess fractions of ``grid`` x ``grid`` with the largest bound
        on the canaries ``idx`` (None when there are too few of them)."""
        best = None
        right = _RightCounts(self.scores[idx], self.signs[idx])  # one sort for every pair
        for fp in grid:
            for fn in grid:
                kp, kn = int(fp * idx.size), int(fn * idx.size)
                if kp + kn == 0 or kp + kn > idx.size:
                    continue
                key = (one_run.epsilon_lower_bound(idx.size, kp + kn, right(kp, kn), delta=delta,
                                                   confidence=confidence), -(fp + fn))
                if best is None or key > best[0]:
                    best = (key, fp, fn)
        return best

    def _fixed(self, k_pos: int, k_neg: int, delta: float, confidence: float, label: str,
               idx: np.ndarray | None = None, group_size: int = 1) -> AuditResult:
        m = self.m if idx is None else idx.size
        return bounds_from_counts(m, k_pos, k_neg, self.right(k_pos, k_neg, idx), delta, confidence, label, group_size)

    def _held_out(self, grid, seed: int, delta: float, confidence: float, label: str,
                  group_size: int = 1) -> AuditResult:
        tune, held = self.split(seed)
        best = self.tune(tune, grid, delta, confidence)
        if best is None:
            raise ValueError(f"{self.m} canaries are too few for a held-out split")
        _, fp, fn = best
        return self._fixed(int(fp * held.size), int(fn * held.size), delta, confidence, label, idx=held,
                           group_size=group_size)


class _RightCounts:
    """Right guesses of the k_pos highest and k_neg lowest scores, for any counts, from one sort: the same
    guesses as :func:`dpaudit.audit.one_run.guess_from_scores` (ties by :func:`dpaudit.audit.one_run.rank_order`)."""

    def __init__(self, scores: np.ndarray, signs: np.ndarray):
        s_sorted = signs[one_run.rank_order(scores)]
        self.top = np.cumsum(s_sorted[::-1] > 0)  # inserted among the k highest
        self.bottom = np.cumsum(s_sorted < 0)  # held out among the k lowest

    def __call__(self, k_pos: int, k_neg: int) -> int:
        return int((self.top[k_pos - 1] if k_pos else 0) + (self.bottom[k_neg - 1] if k_neg else 0))


def _relabel(r: AuditResult, strategy: str, confidence: float) -> AuditResult:
    """The same guesses and bounds, stated at the strategy's overall confidence."""
    d = r.to_dict()
    d.update(strategy=strategy, confidence=float(confidence))
    return AuditResult(**d)


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided Clopper-Pearson interval of a rate.

    Args:
        k: Successes.
        n: Trials.
        confidence: The interval's two-sided confidence.

    Returns:
        (lower, upper), exact (beta quantiles; 0 and 1 at the ends).
    """
    a = 1 - confidence
    lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return lo, hi


def _rate(k: int, n: int, confidence: float) -> Rate:
    return Rate(k / n, *clopper_pearson(k, n, confidence), k, n, confidence)
