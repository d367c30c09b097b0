"""Run-time checks of the mechanism that ran against the one its privacy card describes (docs/probe.md).

The readings come from the white-box probe (dpaudit/probe/probe.py) attached to the training loop's DP
optimizer; the card says what should have happened. Five named checks, each ``pass``, ``fail`` or ``not
tested`` with the reason, and each with a stated false-alarm rate (the chance that an honest run, one that did
exactly what its card says, fails it). Every level is fixed here, before any data is seen:

* ``noise``     noise actually added: the held-out canaries' projections are the noise alone (block coordinates)
                or the noise plus the records' gradients (model coordinates), so sigma_true <= sqrt(S /
                chi2_{ALPHA}(n)) at confidence 1 - ALPHA; fail when that bound is below the card's sigma.
* ``sampling``  sampling rate actually used: the records of each logical batch, b_t, are Binomial(N, q) under
                the card's Poisson sampling. Their total against N q T (exact binomial test) and their spread
                (dispersion sum (b_t - N q)^2 / (N q (1 - q)) against its law simulated from Binomial(N, q), which
                catches fixed-size batches accounted as Poisson), each at ALPHA / 2; and the probe's own canaries
                must have been sampled at the card's q (else the white-box audit is not about this card).
* ``clipping``  clipping enforced: the clipped sum of every logical batch has norm <= b_t C (deterministic, no
                false alarm: it holds whatever the gradients), and clip canaries, which enter as per-sample
                gradients of norm 4 C before the optimizer's clipping, must come out at C: their mean projection
                when sampled minus when not, against 1 (z-test at ALPHA). Under ghost clipping the clip canaries
                enter after clipping (per-sample clipping happens inside the loss's backward, which no probe row
                can reach), so only the norm bound tests the clipping itself.
* ``steps``     noisy steps actually taken: the probe's count against the card's steps at the probe's q
                (deterministic).
* ``divisor``   the noisy sum divided by a constant (the expected batch B), not by the actual batch size b_t:
                dividing by b_t makes the per-step noise scale follow 1 / b_t, so log S_t (the held-out canaries'
                per-step sum of squares) falls with log b_t. One-sided permutation test of their correlation at
                ALPHA (exact under the card: the noise of a step does not depend on its batch size).

Pure NumPy/SciPy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from dpaudit.options import MECHANISM_CHECKS

ALPHA = 0.001  # false-alarm rate of each statistical check (noise, sampling, clip canaries, divisor)
CHECKS = MECHANISM_CHECKS
PERMUTATIONS = 9999
SIMULATIONS = 4000
SEED = 20261125  # the fixed seed of the permutation and simulation draws (a check is a function of its inputs)


@dataclass(frozen=True)
class CardView:
    """What the card says about the mechanism the probe watched."""

    sample_rate: float | None
    noise_multiplier: float | None  # None: not one Gaussian (LMO-DP's Laplace mixture, ...)
    steps: int | None  # steps of the card's events at the probe's sample rate
    clipping_norm: float | None
    dataset_size: int | None
    expected_batch_size: float | None


@dataclass(frozen=True)
class Readings:
    """What the probe saw (dpaudit/probe/probe.py), with the held-out canaries' per-step sums of squares."""

    probe: dict
    records: np.ndarray  # (T,) records per logical step
    sum_ratio: np.ndarray  # (T,) ||clipped sum|| / (b C)
    clip_projections: np.ndarray  # (T, k)
    clip_sampled: np.ndarray  # (T, k) bool
    heldout_ss: np.ndarray | None  # (T,) sum over held-out canaries of the squared projection (units C / D)
    heldout_m: int


def row(check: str, status: str, finding: str, false_alarm: float | None, **values) -> dict:
    return {"check": check, "status": status, "finding": finding, "false_alarm": false_alarm, "values": values}


def run(r: Readings, card: CardView) -> list[dict]:
    """Every check, in :data:`CHECKS` order."""
    return [noise(r, card), sampling(r, card), clipping(r, card), steps(r, card), divisor(r)]


def noise(r: Readings, card: CardView) -> dict:
    if card.noise_multiplier is None or not card.noise_multiplier > 0:
        return row("noise", "not tested", "the card's mechanism is not one Gaussian with sigma > 0", None)
    if r.heldout_ss is None or r.heldout_ss.size == 0 or r.heldout_m == 0:
        return row("noise", "not tested", "the probe recorded no per-step projections of held-out canaries", None)
    n = int(r.heldout_ss.size * r.heldout_m)
    ss = float(np.sum(r.heldout_ss))
    upper = float(np.sqrt(ss / stats.chi2.ppf(ALPHA, n)))
    rms = float(np.sqrt(ss / n))
    s = float(card.noise_multiplier)
    where = ("the noise alone (canary block)" if r.probe.get("coordinates") == "block" else
             "the noise plus the records' gradients (model coordinates: the bound is conservative)")
    if upper < s:
        return row("noise", "fail", f"the updates carry noise sigma <= {upper:.4g} at {1 - ALPHA:.1%} confidence "
                   f"(measured {rms:.4g}), below the card's sigma {s:.4g}: less noise was added than the card says",
                   ALPHA, upper=upper, rms=rms, card=s, projections=n)
    return row("noise", "pass", f"measured noise {rms:.4g} (upper bound {upper:.4g}) on {n} projections of {where}; "
               f"the card's sigma {s:.4g}", ALPHA, upper=upper, rms=rms, card=s, projections=n)


def sampling(r: Readings, card: CardView) -> dict:
    q = card.sample_rate
    qp = float(r.probe.get("sample_rate", np.nan))
    if q is None:
        return row("sampling", "not tested", "the card states no sample rate", None)
    if not np.isclose(qp, q, rtol=1e-6, atol=0):
        return row("sampling", "fail", f"the probe sampled its canaries at q = {qp:.6g}, the card says {q:.6g}: the "
                   "white-box audit is not about this card; attach the probe with the card's sample rate", 0.0,
                   probe_rate=qp, card_rate=q)
    N, b = card.dataset_size, r.records
    if not N or b.size == 0 or (b < 0).any():
        return row("sampling", "not tested", "the card states no dataset size, or the probe counted no records", None)
    T, total = int(b.size), int(b.sum())
    mean_p = float(stats.binomtest(total, N * T, q).pvalue) if q < 1 else float(total == N * T)
    expected = N * q
    disp = float(np.sum((b - expected) ** 2) / (expected * (1 - q))) if q < 1 else 0.0
    disp_p = _dispersion_p(disp, N, q, T) if q < 1 else 1.0
    vals = dict(records=total, expected=expected * T, steps=T, mean_p=mean_p, dispersion=disp / T,
                dispersion_p=disp_p)
    if mean_p < ALPHA / 2:
        return row("sampling", "fail", f"{total} records in {T} logical batches, {expected * T:.0f} expected at the "
                   f"card's q = {q:.6g} of N = {N} (mean {total / T:.2f} per batch against {expected:.2f}; exact "
                   f"binomial p = {mean_p:.2g}): the loop sampled at another rate than the card's", ALPHA, **vals)
    if disp_p < ALPHA / 2:
        return row("sampling", "fail", f"the batch sizes spread {disp / T:.3g} times as much as Poisson sampling at "
                   f"q = {q:.6g} would (p = {disp_p:.2g}): fixed-size or otherwise non-Poisson batches, accounted "
                   "as Poisson", ALPHA, **vals)
    return row("sampling", "pass", f"{total} records in {T} logical batches ({total / T:.2f} per batch; {expected:.2f} "
               f"at q = {q:.6g} of N = {N}), spread as Poisson sampling's", ALPHA, **vals)


def _dispersion_p(observed: float, N: int, q: float, T: int) -> float:
    """Two-sided Monte Carlo p-value of the dispersion statistic under T independent Binomial(N, q) batches."""
    rng = np.random.default_rng(SEED)
    sims = rng.binomial(N, q, size=(SIMULATIONS, T)).astype(np.float64)
    d = np.sum((sims - N * q) ** 2, axis=1) / (N * q * (1 - q))
    lo = (1 + np.sum(d <= observed)) / (SIMULATIONS + 1)
    hi = (1 + np.sum(d >= observed)) / (SIMULATIONS + 1)
    return float(min(1.0, 2 * min(lo, hi)))


def clipping(r: Readings, card: CardView) -> dict:
    tol = float(r.probe.get("sum_tolerance", 1e-4))
    worst = float(np.max(r.sum_ratio)) if r.sum_ratio.size else 0.0
    over = int(np.sum(r.sum_ratio > 1 + tol))
    C = r.probe.get("clipping_norm")
    notes = []
    if card.clipping_norm is not None and C is not None and not np.isclose(C, card.clipping_norm, rtol=1e-6):
        return row("clipping", "fail", f"the optimizer clipped at C = {C:.6g}, the card says {card.clipping_norm:.6g}",
                   0.0, optimizer_c=C, card_c=card.clipping_norm)
    if over:
        return row("clipping", "fail", f"the clipped sum of {over} of {r.sum_ratio.size} logical batches had norm above "
                   f"b C (up to {worst:.3g} b C): per-sample clipping was not enforced", 0.0, worst_ratio=worst,
                   batches_over=over)
    notes.append(f"every clipped sum had norm <= b C (largest {worst:.3f} b C)")
    k = r.clip_projections.shape[1] if r.clip_projections.ndim == 2 else 0
    s = r.clip_sampled.astype(bool) if k else None
    if not k or s.sum() < 2 or (~s).sum() < 2:
        why = ("no clip canaries (model coordinates)" if r.probe.get("coordinates") != "block" or not k
               else "too few clip canaries were sampled")
        return row("clipping", "pass", "; ".join(notes) + f"; {why}, so clipping is tested by the norm bound only",
                   0.0, worst_ratio=worst)
    x = r.clip_projections.astype(np.float64)
    a, b = x[s], x[~s]
    diff = float(a.mean() - b.mean())
    se = float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))
    z = (diff - 1.0) / se
    p = float(2 * stats.norm.sf(abs(z)))
    entry = r.probe.get("clip_entry") or ""
    mult = float(r.probe.get("clip_multiple", 1.0))
    what = (f"clip canaries of norm {mult:g} C entered {entry} and came out at {diff:.3f} C (± {1.96 * se:.3f})")
    vals = dict(worst_ratio=worst, clip_magnitude=diff, clip_se=se, clip_p=p, clip_multiple=mult)
    if p < ALPHA:
        cause = ("the optimizer did not clip them to C" if mult > 1 and diff > 1 else
                 "the path from the clipped sum to the update scales it")
        return row("clipping", "fail", f"{what}, not 1 C (p = {p:.2g}): {cause}", ALPHA, **vals)
    ghost = "" if mult > 1 else " (ghost mode: they test the path after clipping; clipping itself by the norm bound)"
    return row("clipping", "pass", "; ".join(notes) + f"; {what}{ghost}", ALPHA, **vals)


def steps(r: Readings, card: CardView) -> dict:
    T = int(r.probe.get("steps", r.records.size))
    if card.steps is None:
        return row("steps", "not tested", "the card has no event at the probe's sample rate", None, probe=T)
    if T != card.steps:
        return row("steps", "fail", f"{T} noisy steps were taken, the card accounts for {card.steps}", 0.0, probe=T,
                   card=card.steps)
    return row("steps", "pass", f"{T} noisy steps taken, as the card accounts", 0.0, probe=T, card=card.steps)


def divisor(r: Readings) -> dict:
    D = r.probe.get("divisor")
    if r.heldout_ss is None or r.heldout_m == 0:
        return row("divisor", "not tested", "the probe recorded no per-step projections of held-out canaries", None,
                   divisor=D)
    b = r.records.astype(np.float64)
    keep = (b > 0) & (r.heldout_ss > 0)
    if keep.sum() < 3 or np.ptp(b[keep]) == 0:
        return row("divisor", "not tested", "the batch sizes did not vary, so dividing by the actual batch size "
                   "cannot be told from dividing by a constant", None, divisor=D)
    lb, ls = np.log(b[keep]), np.log(r.heldout_ss[keep])
    obs = _corr(lb, ls)
    p = float((1 + np.sum(_permuted_corr(lb, ls) <= obs)) / (PERMUTATIONS + 1))
    slope = float(np.polyfit(lb, ls, 1)[0])
    vals = dict(divisor=D, correlation=obs, slope=slope, p=p)
    if p < ALPHA:
        return row("divisor", "fail", f"the per-step noise scale falls with the batch size (slope of log noise^2 on "
                   f"log b: {slope:.2f}; -2 when the sum is divided by the actual batch size, 0 by a constant; "
                   f"p = {p:.2g}): the update was divided by the actual batch size", ALPHA, **vals)
    return row("divisor", "pass", f"the noise scale does not follow the batch size (slope {slope:.2f}, p = {p:.2g}): "
               f"divided by a constant ({D:g})", ALPHA, **vals)


def _permuted_corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The correlation of x with PERMUTATIONS random permutations of y (fixed seed), in chunks of bounded memory."""
    rng = np.random.default_rng(SEED)
    xc = (x - x.mean()) / np.sqrt(np.sum((x - x.mean()) ** 2))
    yc = (y - y.mean()) / np.sqrt(np.sum((y - y.mean()) ** 2))
    out, chunk = [], max(1, 2_000_000 // x.size)
    for start in range(0, PERMUTATIONS, chunk):
        n = min(chunk, PERMUTATIONS - start)
        out.append(rng.permuted(np.broadcast_to(yc, (n, yc.size)), axis=1) @ xc)
    return np.concatenate(out)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(), y - y.mean()
    d = float(np.sqrt(np.sum(x * x) * np.sum(y * y)))
    return float(np.sum(x * y) / d) if d > 0 else 0.0
