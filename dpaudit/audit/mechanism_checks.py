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
                must have been sampled at the card's q (else the white-box audit is not about this card). Each
                failure names its cause: every batch a multiple of k records (each record k times in its batch,
                :func:`_duplicated`), repeated sizes (fixed-size batches), a rate that changed, another rate.
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

(Over 300 lines on purpose: six checks of a few dozen lines each, sharing the levels fixed above and one row
format; one file keeps every false-alarm rate a report states in one place.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import stats

from dpaudit.audit import sequential
from dpaudit.audit.rows import CheckRow
from dpaudit.options import PROBE_CHECKS

ALPHA = 0.001  # false-alarm rate of each statistical check (noise, sampling, clip canaries, divisor)
STATED_RTOL = 1e-6  # the noise multiplier the optimizer itself holds vs the card's (float round trips only)
CHECKS = PROBE_CHECKS
PERMUTATIONS = 9999
SIMULATIONS = 9999  # two-sided Monte Carlo: the smallest p is 2 / 10^4, below the spread test's ALPHA / 4
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
    sampler: str = "poisson"  # "shuffle": fixed-size batches, sampling without replacement (poisson_sampling=False)


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
    noise: dict | None = None  # the optimizer's noise per step and per tensor (dpaudit/probe/meters.py), units C
    clip_exact: np.ndarray | None = None  # (T,) clip canaries read before the noise: max |out / C - 1| (NaN: none)
    heldout_steps: np.ndarray | None = None  # (T, m_out) held-out canaries' projections, for the independence test


def row(check: str, status: str, finding: str, false_alarm: float | None, **values) -> CheckRow:
    """One check's outcome as the frozen :class:`dpaudit.audit.rows.CheckRow`."""
    return CheckRow(check, status, finding, false_alarm, values)


def run(r: Readings, card: CardView) -> list[CheckRow]:
    """Every check, the shipped ones then the registered ones (:mod:`dpaudit.audit.check_registry`). A record the statistics cannot read (NaN, empty or inconsistent
    arrays) fails the check it broke, with the reason, instead of stopping the evaluation."""
    out = []
    for name, fn in (("noise", lambda: noise(r, card)), ("sampling", lambda: sampling(r, card)),
                     ("clipping", lambda: clipping(r, card)), ("steps", lambda: steps(r, card)),
                     ("divisor", lambda: divisor(r, card)), ("coverage", lambda: coverage(r))):
        try:
            out.append(fn())
        except (ValueError, FloatingPointError, ZeroDivisionError, IndexError, TypeError, KeyError) as e:
            out.append(row(name, "fail", f"the probe's record cannot be read by this check ({type(e).__name__}: {e}): "
                           "a degenerate or damaged record is not evidence that the mechanism ran as the card says",
                           0.0))
    from dpaudit.audit import check_registry

    out += check_registry.run_registered(r, card)  # checks of your own (dpaudit.api.register_mechanism_check)
    return with_online_alarms(out, r.probe.get("online"))


def with_online_alarms(rows: list[CheckRow], online) -> list[CheckRow]:
    """An alarm the probe raised while training ran is evidence (issue wave 5 · 3/5): the check it names fails, with
    the step it fired at, whatever the offline test over the whole run says (a schedule that lowers the noise late,
    say, can pass a test of the whole run). Its false-alarm rate is the online test's share of the probe's alpha
    (anytime-valid under continuous monitoring, dpaudit/probe/online.py); a deterministic alarm's is 0."""
    alarms = online.get("alarms") if isinstance(online, dict) else None
    if not isinstance(alarms, dict) or not alarms:
        return rows
    alpha = online.get("alpha")
    statistical = online.get("statistical") if isinstance(online.get("statistical"), list) else []
    share = float(alpha) / max(len(statistical), 1) if isinstance(alpha, (int, float)) else None
    out = []
    for r in rows:
        a = alarms.get(r.check)
        if isinstance(a, dict) and r.status != "fail":
            step = a.get("step")
            offline = f"the offline test over the whole run: {r.status}"
            r = row(r.check, "fail", f"online, at step {step}: {str(a.get('finding'))[:400]} (raised while training "
                    f"ran; {offline})", share if r.check in statistical else 0.0,
                    online_step=step if isinstance(step, int) else None)
        out.append(r)
    return out


def noise(r: Readings, card: CardView) -> CheckRow:
    if card.noise_multiplier is None or not card.noise_multiplier > 0:
        return row("noise", "not tested", "the card's mechanism is not one Gaussian with sigma > 0", None)
    stated = r.probe.get("noise_multiplier")
    s = float(card.noise_multiplier)
    if isinstance(stated, (int, float)) and not isinstance(stated, bool) and stated < s * (1 - STATED_RTOL):
        # the optimizer itself said so: no statistics needed (its own noise_multiplier, read when the probe attached)
        return row("noise", "fail", f"the DP optimizer the probe watched ran with noise multiplier {stated:.6g}, below "
                   f"the card's sigma {s:.6g}: the run added less noise than the card says (or the record is from "
                   "another run)", 0.0, stated=float(stated), card=s)
    if r.noise is not None:
        return _noise_full(r, card)
    if r.heldout_ss is None or r.heldout_ss.size == 0 or r.heldout_m == 0:
        return row("noise", "not tested", "the probe recorded no per-step projections of held-out canaries", None)
    return _noise_canaries(r, card, ALPHA)


def _noise_canaries(r: Readings, card: CardView, alpha: float) -> CheckRow:
    """The held-out canaries' pooled chi2 bound on the noise (a record written before the per-tensor readings)."""
    if r.heldout_ss is None or card.noise_multiplier is None:
        raise ValueError("no held-out canary projections, or no sigma on the card")
    n = int(r.heldout_ss.size * r.heldout_m)
    ss = float(np.sum(r.heldout_ss))
    if n == 0 or not np.isfinite(ss):
        raise ValueError("no finite held-out canary projections")
    upper = float(np.sqrt(ss / stats.chi2.ppf(alpha, n)))
    rms = float(np.sqrt(ss / n))
    s = float(card.noise_multiplier)
    where = ("the noise alone (canary block)" if r.probe.get("coordinates") == "block" else
             "the noise plus the records' gradients (model coordinates: the bound is conservative)")
    if upper < s:
        return row("noise", "fail", f"the updates carry noise sigma <= {upper:.4g} at {1 - ALPHA:.1%} confidence "
                   f"(measured {rms:.4g}), below the card's sigma {s:.4g}: less noise was added than the card says",
                   alpha, upper=upper, rms=rms, card=s, projections=n)
    return row("noise", "pass", f"measured noise {rms:.4g} (upper bound {upper:.4g}) on {n} projections of {where}; "
               f"the card's sigma {s:.4g}", alpha, upper=upper, rms=rms, card=s, projections=n)


def _noise_full(r: Readings, card: CardView) -> CheckRow:
    """Four tests at ALPHA / 4 each (one family): the optimizer's noise at every step (Bonferroni over steps, so a
    schedule shows), in every tensor pooled over the steps (Bonferroni over tensors, so a tensor left without
    noise shows), its independence from step to step (a reused draw), and the held-out canaries' pooled bound."""
    a = ALPHA / 4
    if r.noise is None or card.noise_multiplier is None:
        raise ValueError("no per-step noise readings, or no sigma on the card")
    s = float(card.noise_multiplier)
    z = r.noise
    ss_t, n_t = np.asarray(z["noise_ss_step"], dtype=np.float64), np.asarray(z["noise_n_step"], dtype=np.float64)
    ss_k, n_k = np.asarray(z["noise_ss_tensor"], dtype=np.float64), np.asarray(z["noise_n_tensor"], dtype=np.float64)
    names = list(z.get("names") or [f"tensor {i}" for i in range(ss_k.size)])
    if ss_t.size == 0 or not (np.isfinite(ss_t).all() and np.isfinite(ss_k).all()) or (n_t <= 0).any():
        raise ValueError("the per-step noise readings are empty or not finite")
    vals = dict(card=s, steps=int(ss_t.size), coordinates_per_step=int(n_t.max()))
    # first, independence of consecutive steps' noise (the chi2 bounds below assume it):
    # sum_t <n_t, n_t-1> / (sigma_hat^2 sqrt(sum n)) ~ N(0, 1)
    cross = np.asarray(z.get("noise_cross_step", np.zeros(0)), dtype=np.float64)
    if cross.size > 1:
        sig2 = ss_t.sum() / n_t.sum()
        zstat = float(cross[1:].sum() / (sig2 * np.sqrt(n_t[1:].sum()))) if sig2 > 0 else 0.0
        p_ind = float(2 * stats.norm.sf(abs(zstat)))
        vals.update(independence_z=zstat, independence_p=p_ind)
        if p_ind < a:
            return row("noise", "fail", f"consecutive steps' noise is correlated (z = {zstat:.3g}, p = {p_ind:.2g}): the "
                       "same draw, or part of it, is added again; the card's Gaussian mechanism draws afresh every step",
                       ALPHA, **vals)
    # per step: sigma_t <= sqrt(ss / chi2_{a/T}(n)) at 1 - a/T each
    upper_t = np.sqrt(ss_t / stats.chi2.ppf(a / ss_t.size, n_t))
    low = np.flatnonzero(upper_t < s)
    rms_t = np.sqrt(ss_t / n_t)
    vals.update(rms=float(np.sqrt(ss_t.sum() / n_t.sum())), min_step_rms=float(rms_t.min()),
                step_of_min=int(np.argmin(rms_t)) + 1)
    if low.size:
        return row("noise", "fail", f"{low.size} of {ss_t.size} steps carried less noise than the card's sigma {s:.4g} "
                   f"(from step {low[0] + 1}; the lowest, step {int(np.argmin(rms_t)) + 1}, measured {rms_t.min():.4g}; "
                   f"each bound at {1 - a / ss_t.size:.6%}): a noise schedule or a step without its noise, which the "
                   "card does not state", ALPHA, steps_below=int(low.size), first_step_below=int(low[0]) + 1, **vals)
    # per tensor pooled over steps
    have = n_k > 0
    upper_k = np.full(ss_k.shape, np.inf)
    upper_k[have] = np.sqrt(ss_k[have] / stats.chi2.ppf(a / max(int(have.sum()), 1), n_k[have]))
    short = np.flatnonzero(upper_k < s)
    if short.size:
        which = ", ".join(names[i] for i in short[:6]) + (f" and {short.size - 6} more" if short.size > 6 else "")
        return row("noise", "fail", f"{short.size} of {int(have.sum())} parameter tensors carried less noise than sigma "
                   f"{s:.4g} ({which}; lowest measured {float(np.sqrt(ss_k[short] / n_k[short]).min()):.4g}): noise "
                   "left out of part of the model", ALPHA, tensors_short=[names[i] for i in short], **vals)
    if r.heldout_ss is not None and r.heldout_ss.size and r.heldout_m:
        c = _noise_canaries(r, card, a)
        if c.status == "fail":
            return replace(c, false_alarm=ALPHA)
        vals.update(canary_upper=c.values["upper"])
    return row("noise", "pass", f"every one of {ss_t.size} steps and every one of {int(have.sum())} parameter tensors "
               f"carried noise of at least the card's sigma {s:.4g} (measured {vals['rms']:.4g}; lowest step "
               f"{vals['min_step_rms']:.4g}), drawn afresh each step", ALPHA, **vals)


def sampling(r: Readings, card: CardView) -> CheckRow:
    q = card.sample_rate
    qp = float(r.probe.get("sample_rate", np.nan))
    if q is None:
        return row("sampling", "not tested", "the card states no sample rate", None)
    if not np.isclose(qp, q, rtol=1e-6, atol=0):
        return row("sampling", "fail", f"the probe sampled its canaries at q = {qp:.6g}, the card says {q:.6g}: the "
                   "white-box audit is not about this card; attach the probe with the card's sample rate", 0.0,
                   probe_rate=qp, card_rate=q)
    N, b = card.dataset_size, r.records
    n_loop = r.probe.get("dataset_size")
    if N and isinstance(n_loop, int) and n_loop != N:
        return row("sampling", "fail", f"the loop samples from N = {n_loop} records (the dataset size the probe was "
                   f"given), the card accounts for N = {N}: at the same batch size it samples at another rate than the "
                   "card's q; make the card from the dataset the loop samples", 0.0, probe_dataset_size=n_loop,
                   card_dataset_size=N)
    if not N or b.size == 0 or (b < 0).any():
        return row("sampling", "not tested", "the card states no dataset size, or the probe counted no records", None)
    if card.sampler == "shuffle":
        return _fixed_size(b, N, q)
    T, total = int(b.size), int(b.sum())
    a = ALPHA / 4  # mean, spread, repeated sizes, windows: one family
    mean_p = float(stats.binomtest(total, N * T, q).pvalue) if q < 1 else float(total == N * T)
    expected = N * q
    disp = float(np.sum((b - expected) ** 2) / (expected * (1 - q))) if q < 1 else 0.0
    disp_p = _dispersion_p(disp, N, q, T) if q < 1 else 1.0
    vals = dict(records=total, expected=expected * T, steps=T, mean_p=mean_p, dispersion=disp / T,
                dispersion_p=disp_p)
    if q < 1:
        _, log_repeat = sequential.batch_sizes_log_e(b, N, q)
        windows = _windows(b, N, q)
        vals.update(repeat_log_e=log_repeat, windows=len(windows),
                    window_p=min((w["p"] for w in windows), default=1.0))
        # one size in every batch is fixed-size batching (its own finding below), not k copies of each record:
        # dp-transformers' shuffled batches of 16 are each a multiple of 16 without any record repeated
        dup = _duplicated(b, N, q) if np.unique(b[b > 0]).size > 1 else None
        if dup is not None and dup[1] < a * DUPLICATE_SHARE:
            k, p = dup
            return row("sampling", "fail", f"every one of the {int((b > 0).sum())} non-empty logical batches held a "
                       f"multiple of {k} records (exact p = {p:.2g} under Poisson sampling at q = {q:.6g}): each "
                       f"record appears {k} times in its batch (duplicated records), so a record's privacy is a "
                       f"group of {k}'s, not the card's", ALPHA, duplicated=k, duplicated_p=p, **vals)
        if log_repeat >= np.log(1 / a):
            same = int(np.sum(b[1:] == b[:-1]))
            return row("sampling", "fail", f"{same} of {T - 1} consecutive batches had the same number of records "
                       f"(anytime-valid e-value {np.exp(min(log_repeat, 700)):.3g} >= {1 / a:.3g}): fixed-size batches "
                       f"(shuffling) accounted as Poisson sampling at q = {q:.6g}", ALPHA, repeated=same, **vals)
        bad = [w for w in windows if w["p"] < a * (1 - DUPLICATE_SHARE) / len(windows)]
        if bad and mean_p >= a:
            w = bad[0]
            return row("sampling", "fail", f"steps {w['first']}-{w['last']} held {w['records']} records, "
                       f"{w['expected']:.0f} expected at the card's q = {q:.6g} (exact binomial p = {w['p']:.2g}, "
                       f"Bonferroni over {len(windows)} windows): the sampling rate changed during training",
                       ALPHA, **vals)
    if mean_p < a:
        more = (f", or from {total / (expected * T):.2g} times the card's N records (a dataset holding each record "
                "several times: duplicated records)") if total > expected * T else ""
        return row("sampling", "fail", f"{total} records in {T} logical batches, {expected * T:.0f} expected at the "
                   f"card's q = {q:.6g} of N = {N} (mean {total / T:.2f} per batch against {expected:.2f}; exact "
                   f"binomial p = {mean_p:.2g}): the loop sampled at another rate than the card's{more}", ALPHA,
                   **vals)
    if disp_p < a:
        return row("sampling", "fail", f"the batch sizes spread {disp / T:.3g} times as much as Poisson sampling at "
                   f"q = {q:.6g} would (p = {disp_p:.2g}): fixed-size or otherwise non-Poisson batches, accounted "
                   "as Poisson", ALPHA, **vals)
    return row("sampling", "pass", f"{total} records in {T} logical batches ({total / T:.2f} per batch; {expected:.2f} "
               f"at q = {q:.6g} of N = {N}), spread as Poisson sampling's", ALPHA, **vals)


# the duplicated-records test's share of the windows' level (the family stays at ALPHA): under Poisson sizes every
# batch is a multiple of the same k with probability about k^-T, so a tiny level loses nothing
DUPLICATE_SHARE = 0.01


def fixed_batch(sample_rate: float, dataset_size: int) -> int:
    """B of fixed-size batches at rate q of N records, as the accountants take it (round(q N), at least 1)."""
    return max(1, round(sample_rate * dataset_size))


def _fixed_size(b: np.ndarray, N: int, q: float) -> CheckRow:
    """Fixed-size batches (the card's sampler "shuffle", accounted as sampling without replacement of B = round(q N)
    records): deterministic, no batch above B (smaller ones, an epoch's last, only help)."""
    B = fixed_batch(q, N)
    T, total, top = int(b.size), int(b.sum()), int(b.max())
    vals = dict(records=total, steps=T, fixed_batch=B, largest=top, below_b=int(np.sum(b < B)))
    if top > B:
        return row("sampling", "fail", f"a logical batch held {top} records, more than the fixed batch size B = {B} "
                   f"(q = {q:.6g} of N = {N}) the card's sampling without replacement is accounted at: the loop sampled "
                   "more than the card says", 0.0, **vals)
    return row("sampling", "pass", f"{total} records in {T} logical batches, none above the card's fixed batch size "
               f"B = {B} (sampling without replacement; {vals['below_b']} smaller, as an epoch's last batch is)",
               0.0, **vals)


WINDOWS = 10  # time-resolved sampling: the steps in this many consecutive windows (fewer on short runs)


def _duplicated(b: np.ndarray, N: int, q: float) -> tuple[int, float] | None:
    """(k, p) when every non-empty batch size is a multiple of the same k >= 2 (each record k times in its batch):
    k the sizes' greatest common divisor, p a valid p-value for "the sizes share a factor" under Binomial(N, q)
    sizes, the union over every prime r that could divide them of the product over the non-empty batches of
    P(r divides b | b > 0). None when the sizes share no factor."""
    sizes = b[b > 0].astype(np.int64)
    if sizes.size == 0:
        return None
    k = int(np.gcd.reduce(sizes))
    if k < 2:
        return None
    top = int(min(sizes.min(), 1000))
    sieve = np.ones(top + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, int(top ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    nonempty = float(stats.binom.sf(0, N, q))
    p = sum(float(stats.binom.pmf(np.arange(r, N + 1, r), N, q).sum() / nonempty) ** sizes.size
            for r in np.flatnonzero(sieve))
    return k, min(1.0, p)


def _windows(b: np.ndarray, N: int, q: float) -> list[dict]:
    """Exact binomial test of each window's records against N q per step (windows of >= 20 steps)."""
    T = b.size
    k = min(WINDOWS, T // 20)
    if k < 2:
        return []
    out = []
    for idx in np.array_split(np.arange(T), k):
        tot = int(b[idx].sum())
        out.append({"first": int(idx[0]) + 1, "last": int(idx[-1]) + 1, "records": tot,
                    "expected": N * q * idx.size, "p": float(stats.binomtest(tot, N * idx.size, q).pvalue)})
    return out


def _dispersion_p(observed: float, N: int, q: float, T: int) -> float:
    """Two-sided Monte Carlo p-value of the dispersion statistic under T independent Binomial(N, q) batches."""
    d = _dispersion_null(int(N), float(q), int(T))
    lo = (1 + np.searchsorted(d, observed, side="right")) / (SIMULATIONS + 1)  # draws <= observed
    hi = (1 + d.size - np.searchsorted(d, observed, side="left")) / (SIMULATIONS + 1)  # draws >= observed
    return float(min(1.0, 2 * min(lo, hi)))


@lru_cache(maxsize=8)
def _dispersion_null(N: int, q: float, T: int) -> np.ndarray:
    """The simulated law of the dispersion statistic (sorted; in chunks of bounded memory): a function of
    (N, q, T) and the fixed seed only, so a card checked again, or many runs of one card, draw it once."""
    rng = np.random.default_rng(SEED)
    d = np.concatenate([np.sum((rng.binomial(N, q, size=(n, T)).astype(np.float64) - N * q) ** 2, axis=1)
                        for n in _chunks(SIMULATIONS, T)]) / (N * q * (1 - q))
    out = np.sort(d)
    out.setflags(write=False)
    return out


def _chunks(total: int, width: int) -> list[int]:
    per = max(1, 2_000_000 // max(width, 1))
    return [min(per, total - i) for i in range(0, total, per)]


def clipping(r: Readings, card: CardView) -> CheckRow:
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
    exact = r.clip_exact[np.isfinite(r.clip_exact)] if r.clip_exact is not None and r.clip_exact.size else None
    ex_tol = float(r.probe.get("clip_exact_tolerance", 1e-3))
    if exact is not None and exact.size:
        if (exact > ex_tol).any():
            bad = int(np.sum(exact > ex_tol))
            return row("clipping", "fail", f"at {bad} of {exact.size} steps a clip canary (a per-sample gradient of norm "
                       f"{float(r.probe.get('clip_multiple', 4)):g} C) came out of the optimizer's own clipping at other "
                       f"than C (off by up to {float(exact.max()):.3g} C, read before the noise): per-sample clipping "
                       "is not enforced", 0.0, worst_ratio=worst, clip_exact_max=float(exact.max()))
        notes.append(f"clip canaries left the optimizer's clipping at exactly C in {exact.size} steps")
    k = r.clip_projections.shape[1] if r.clip_projections.ndim == 2 else 0
    s = r.clip_sampled.astype(bool) if k else np.zeros(0, dtype=bool)
    if not k or s.sum() < 2 or (~s).sum() < 2:
        why = ("no clip canaries (model coordinates)" if r.probe.get("coordinates") != "block" or not k
               else "too few clip canaries were sampled")
        return row("clipping", "pass", "; ".join(notes) + f"; {why}, so clipping is tested by the norm bound only",
                   0.0, worst_ratio=worst)
    x = r.clip_projections.astype(np.float64)
    a, b = x[s], x[~s]
    diff = float(a.mean() - b.mean())
    se = float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))
    if not se > 0:  # no noise at all on the block: the projections are exact
        ok = abs(diff - 1.0) <= 1e-3
        return row("clipping", "pass" if ok else "fail",
                   "; ".join(notes) + f"; clip canaries came out at exactly {diff:.4g} C (the block carried no noise: "
                   "see the noise check)", 0.0, worst_ratio=worst, clip_magnitude=diff)
    z = (diff - 1.0) / se
    # Welch's t with the Welch-Satterthwaite degrees of freedom, not the normal: with ~100 sampled canary readings the
    # normal tail under-states p (10^4 honest runs failed 0.18% at the stated 0.1%; with t: tests/audit)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1))
    p = float(2 * stats.t.sf(abs(z), df))
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


def steps(r: Readings, card: CardView) -> CheckRow:
    T = int(r.probe.get("steps", r.records.size))
    if card.steps is None:
        return row("steps", "not tested", "the card has no event at the probe's sample rate", None, probe=T)
    if T > card.steps:
        return row("steps", "fail", f"{T} noisy steps were taken, the card accounts for {card.steps}: the card "
                   "under-counts the steps, so its epsilon is too small", 0.0, probe=T, card=card.steps)
    if T < card.steps:
        return row("steps", "pass", f"{T} noisy steps taken, fewer than the card's {card.steps}: the card over-counts "
                   "(a run stopped early under its planned card); its epsilon over-states the privacy loss, which is "
                   "conservative", 0.0, probe=T, card=card.steps, over_counted=card.steps - T)
    return row("steps", "pass", f"{T} noisy steps taken, as the card accounts", 0.0, probe=T, card=card.steps)


def divisor(r: Readings, card: CardView | None = None) -> CheckRow:
    """Two readings of the divisor D the update was divided by. Deterministic: Opacus' own D (its
    ``int(len(dataset) * q)`` times the world size, recorded as ``divisor_from = "optimizer"``) must be the card's
    q N to within Opacus' rounding (one record): another D means the loop's dataset is not the card's N (it samples
    at another rate than the card states, issue wave 5 · 3/5). Statistical: the per-step noise
    scale must not follow the batch size (dividing by the actual batch size instead of a constant)."""
    D = r.probe.get("divisor")
    q, N = (None, None) if card is None else (card.sample_rate, card.dataset_size)
    # q N from the card's rate and size, not its stated expected batch: the divisor does not change the privacy
    # of a step, it only shows the N Opacus saw (a card stating its batch as the loader's B is not accused)
    if r.probe.get("divisor_from") == "optimizer" and q and N and isinstance(D, (int, float)) and abs(D - q * N) >= 1:
        return row("divisor", "fail", f"the optimizer divided each update by D = {D:g} (Opacus' int(len(dataset) q)), "
                   f"the card's q N is {q * N:g} (q = {q:.6g}, N = {N}): Opacus saw a dataset of about N = {D / q:.0f} "
                   "records, so the loop sampled at another rate than the card accounts for at the same batch size; "
                   "make the card from the dataset the loop samples", 0.0, divisor=D, card_batch=q * N)
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


def coverage(r: Readings) -> CheckRow:
    """Deterministic: with the model, nothing outside the DP optimizer moved, and nothing else moved its
    parameters between its steps (dpaudit/probe/meters.py)."""
    c = r.probe.get("coverage") or {}
    if not c.get("model_given"):
        if r.probe.get("mode") == "functional":  # no optimizer and no module to watch: a limit of the interface
            return row("coverage", "not tested", "the functional probe sees only the arrays handed to it around the "
                       "noise, not the model or its update: whether a parameter was trained outside DP is not "
                       "checked (docs/probe.md)", None)
        return row("coverage", "not tested", "the probe was attached without the model (attach_probe(optimizer, "
                   "model=model, ...) checks that every parameter that moved was moved by the DP optimizer)", None)
    outside = c.get("changed_outside") or []
    between = c.get("changed_between_steps") or []
    vals = dict(dp_parameters=c.get("dp_parameters"), outside=c.get("outside"),
                trainable_outside=len(c.get("trainable_outside") or []))
    if outside:
        names = ", ".join(f"{x['name']} ({x['kind']}, from step {x['step']})" for x in outside[:5])
        return row("coverage", "fail", f"{len(outside)} tensor(s) outside the DP optimizer changed during training "
                   f"({names}): trained or updated from the data without DP", 0.0,
                   changed=[x["name"] for x in outside], **vals)
    if between:
        names = ", ".join(f"{x['name']} (before step {x['step']})" for x in between[:5])
        return row("coverage", "fail", f"{len(between)} parameter(s) of the DP optimizer moved between its steps "
                   f"({names}): a second optimizer or a hand-written update changes them without DP", 0.0,
                   changed=[x["name"] for x in between], **vals)
    extra = (f"; {vals['trainable_outside']} trainable parameter(s) are not in the DP optimizer and did not change"
             if vals["trainable_outside"] else "")
    return row("coverage", "pass", f"every parameter that changed was changed by the DP optimizer's steps "
               f"({vals['dp_parameters']} tensors); {vals['outside']} tensor(s) outside it, buffers included, stayed "
               f"as they were{extra}", 0.0, **vals)
