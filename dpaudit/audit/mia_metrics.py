"""Membership-inference metrics from scores (higher = more likely member). NumPy/SciPy; sklearn's ROC curve is
imported where it is used (the score auditor of dpaudit[audit], which has no scikit-learn, reads the AUC and its
interval without it).

TPR at a target FPR uses the last ROC point whose FPR does not exceed the target (no interpolation),
so it never overstates the attack. The AUC interval is a percentile bootstrap over members and
non-members resampled separately (stratified), with a fixed seed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import rankdata


@dataclass(frozen=True)
class MiaMetrics:
    n_members: int
    n_nonmembers: int
    auc: float
    auc_ci: tuple[float, float]
    auc_ci_level: float
    tpr_at_0_1_fpr: float
    tpr_at_1_fpr: float
    balanced_accuracy: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["auc_ci"] = list(self.auc_ci)
        return d


def split_scores(scores, membership) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=float)
    mem = np.asarray(membership)
    mem = mem > 0 if mem.dtype != bool else mem
    return scores[mem], scores[~mem]


def tpr_at_fpr(labels: np.ndarray, scores: np.ndarray, target_fpr: float) -> float:
    from sklearn.metrics import roc_curve

    fpr, tpr, _ = roc_curve(labels, scores)
    ok = fpr <= target_fpr + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def compute(scores, membership, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> MiaMetrics:
    """AUC (with bootstrap interval), TPR at 0.1% and 1% FPR, best balanced accuracy."""
    ins, outs = split_scores(scores, membership)
    if ins.size == 0 or outs.size == 0:
        raise ValueError("membership metrics need at least one member and one non-member")
    from sklearn.metrics import roc_auc_score, roc_curve

    labels = np.r_[np.ones(ins.size), np.zeros(outs.size)]
    allscores = np.r_[ins, outs]
    auc = float(roc_auc_score(labels, allscores))
    lo, hi = auc_interval(ins, outs, n_boot, level, seed)
    fpr, tpr, _ = roc_curve(labels, allscores)
    bal = float(np.max(1 - (fpr + (1 - tpr)) / 2))
    return MiaMetrics(n_members=int(ins.size), n_nonmembers=int(outs.size), auc=auc,
                      auc_ci=(float(lo), float(hi)), auc_ci_level=level,
                      tpr_at_0_1_fpr=tpr_at_fpr(labels, allscores, 0.001),
                      tpr_at_1_fpr=tpr_at_fpr(labels, allscores, 0.01), balanced_accuracy=bal)


def auc_interval(ins: np.ndarray, outs: np.ndarray, n_boot: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Stratified bootstrap interval of the AUC (members and non-members resampled apart).

    Each resample is a count per original score (the same draws as ``rng.choice(scores, size)``), and its
    Mann-Whitney statistic is read from one sort of the held-out scores made before the loop: for every member
    score, the resampled held-out weight below it and at it (ties 1/2). No sort per resample, the same AUC to the
    last bit as ranking each resample (the statistic is a sum of half-integers, exact in float64;
    tests/audit/test_fast_statistics.py)."""
    rng = np.random.default_rng(seed)
    ins, outs = np.asarray(ins, dtype=float), np.asarray(outs, dtype=float)
    order = np.argsort(outs, kind="stable")
    sorted_outs = outs[order]
    below = np.searchsorted(sorted_outs, ins, side="left")  # held-out scores < each member's, in sorted order
    at_or_below = np.searchsorted(sorted_outs, ins, side="right")
    pairs = float(ins.size) * float(outs.size)
    boots = np.empty(n_boot)
    cum = np.zeros(outs.size + 1, dtype=np.int64)
    for b in range(n_boot):
        w_in = np.bincount(rng.choice(ins.size, ins.size), minlength=ins.size)
        w_out = np.bincount(rng.choice(outs.size, outs.size), minlength=outs.size)
        np.cumsum(w_out[order], out=cum[1:])
        u2 = int(np.dot(w_in, cum[below] + cum[at_or_below]))  # twice the Mann-Whitney U
        boots[b] = (u2 / 2) / pairs
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def _auc_interval_by_ranks(ins: np.ndarray, outs: np.ndarray, n_boot: int = 1000, level: float = 0.95,
                           seed: int = 0) -> tuple[float, float]:
    """The definition :func:`auc_interval` is held to: each resample drawn and ranked."""
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for b in range(n_boot):
        boots[b] = _auc_fast(rng.choice(ins, ins.size), rng.choice(outs, outs.size))
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def auc(ins: np.ndarray, outs: np.ndarray) -> float:
    """The AUC (Mann-Whitney, ties 1/2): sklearn's roc_auc_score, without sklearn."""
    return _auc_fast(np.asarray(ins, dtype=float), np.asarray(outs, dtype=float))


def roc_points(scores, membership) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.metrics import roc_curve

    ins, outs = split_scores(scores, membership)
    labels = np.r_[np.ones(ins.size), np.zeros(outs.size)]
    fpr, tpr, _ = roc_curve(labels, np.r_[ins, outs])
    return fpr, tpr


def _auc_fast(ins: np.ndarray, outs: np.ndarray) -> float:
    """Mann-Whitney AUC from average ranks, ties counted as 1/2 (equals sklearn's roc_auc_score, without its
    ROC curve: the bootstrap calls it a thousand times)."""
    r_in = rankdata(np.r_[ins, outs])[: ins.size].sum()
    return float((r_in - ins.size * (ins.size + 1) / 2) / (ins.size * outs.size))
