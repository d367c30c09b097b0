"""The probe's new readings and decisions (docs/probe.md): the anytime-valid e-processes keep their false-alarm rate
on simulated honest streams and find the departures they are built for; the per-step, per-tensor and independence
parts of the noise check, the repeated-size and window parts of the sampling check and the coverage check, each on
readings whose truth is known; a degenerate record fails its check instead of stopping the evaluation; a failed
check decides the headline verdict and shows in ``dpaudit compare``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.stats import binom

from dpaudit.audit import mechanism_checks as mc
from dpaudit.audit import sequential
from dpaudit.audit.rows import CheckRow, MechanismEvidence, TestRow
from dpaudit.claim import verdict
from dpaudit.claim.reaccount import ClaimAccounting
from dpaudit.gate import compare

N, Q, SIGMA, T = 1000, 0.05, 1.0, 200
SIZES = np.array([4096, 64, 1024, 2])  # coordinates read per tensor per step


def test_noise_e_process_keeps_its_rate_under_honest_noise_and_flags_half_noise_at_once():
    rng = np.random.default_rng(0)
    alpha, reps, alarms = 0.05, 400, 0
    for _ in range(reps):
        e = sequential.NoiseScale(1)
        for _t in range(50):
            n = np.array([64])
            e.update(rng.chisquare(n), n)  # honest: chi2(n) at the card's sigma
            if e.log_e()[0] >= np.log(1 / alpha):
                alarms += 1
                break
    assert alarms <= binom.ppf(0.999, reps, alpha), alarms  # Ville: P(ever >= 1/alpha) <= alpha
    e = sequential.NoiseScale(1)
    n = np.array([4096])
    e.update(rng.chisquare(n) / 4, n)  # half the noise: X = chi2 / 4
    assert e.log_e()[0] > np.log(1e6)


def test_a_nan_step_is_no_evidence_and_leaves_the_e_process_finite():
    """A diverged step (NaN update) multiplies the e-process by 1: no alarm from it, no NaN after it, and half the
    noise afterwards is still found."""
    rng = np.random.default_rng(1)
    n = np.array([64, 64])
    e = sequential.NoiseScale(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a RuntimeWarning
        for _ in range(5):
            e.update(rng.chisquare(n), n)
        before = e.log_e().copy()
        e.update(np.array([np.nan, rng.chisquare(64)]), n)
        assert np.isfinite(e.log_e()).all() and e.log_e()[0] <= before[0] + 1e-9
        for _ in range(3):
            e.update(rng.chisquare(n) / 4, n)
    assert (e.log_e() > np.log(1e3)).all()


def test_batch_size_e_process_keeps_its_rate_and_flags_fixed_size_batches_within_a_few_steps():
    rng = np.random.default_rng(1)
    alpha, reps, alarms = 0.05, 300, 0
    for _ in range(reps):
        e = sequential.BatchSizes(N, Q)
        for b in rng.binomial(N, Q, size=100):
            e.update(int(b))
            if e.log_e() >= np.log(1 / alpha):
                alarms += 1
                break
    assert alarms <= binom.ppf(0.999, reps, alpha), alarms
    e, steps = sequential.BatchSizes(N, Q), 0
    while e.log_e() < np.log(1 / 0.001):
        e.update(50 if steps % 20 else 37)  # shuffled batches of 50 (q N = 50) with a short one now and then
        steps += 1
    assert steps <= 10, steps


def _noise(rng, sigma_step=None, tensor_sigma=None, reuse=False):
    sig_t = np.full(T, SIGMA) if sigma_step is None else sigma_step
    sig_k = np.ones(SIZES.size) if tensor_sigma is None else tensor_sigma
    prev, ss_t, cross, ss_k = None, [], [], np.zeros(SIZES.size)
    fixed = [rng.normal(size=n) for n in SIZES]
    for t in range(T):
        draws = [(fixed[k] if reuse else rng.normal(size=n)) * sig_t[t] * sig_k[k] for k, n in enumerate(SIZES)]
        sq = np.array([float(d @ d) for d in draws])
        ss_t.append(sq.sum())
        ss_k += sq
        cross.append(0.0 if prev is None else sum(float(a @ b) for a, b in zip(draws, prev)))
        prev = draws
    return {"noise_ss_step": np.array(ss_t), "noise_n_step": np.full(T, SIZES.sum()),
            "noise_cross_step": np.array(cross), "noise_ss_tensor": ss_k, "noise_n_tensor": SIZES * T,
            "names": ["w", "b", "emb", "bias2"]}


def _readings(rng, noise, **kw):
    b = rng.binomial(N, Q, size=T)
    probe = {"coordinates": "block", "sample_rate": Q, "clipping_norm": 1.0, "steps": T, "divisor": N * Q,
             "clip_multiple": 4.0, "sum_tolerance": 1e-4, "coverage": kw.pop("coverage", {"model_given": False})}
    return mc.Readings(probe=probe, records=kw.pop("records", b).astype(np.int64), sum_ratio=np.full(T, 0.5),
                       clip_projections=np.zeros((T, 0), np.float32), clip_sampled=np.zeros((T, 0), bool),
                       heldout_ss=None, heldout_m=0, noise=noise, **kw)


CARD = mc.CardView(sample_rate=Q, noise_multiplier=SIGMA, steps=T, clipping_norm=1.0, dataset_size=N,
                   expected_batch_size=N * Q)


def test_noise_check_passes_honest_noise_and_names_a_schedule_a_missing_tensor_and_a_reused_draw():
    rng = np.random.default_rng(2)
    flagged = sum(mc.noise(_readings(rng, _noise(rng)), CARD).status == "fail" for _ in range(60))
    assert flagged <= 1
    sched = np.r_[np.full(T // 2, SIGMA), np.full(T - T // 2, 0.8 * SIGMA)]
    row = mc.noise(_readings(rng, _noise(rng, sigma_step=sched)), CARD)
    assert row.status == "fail" and "schedule" in row.finding and row.values["first_step_below"] > T // 2 - 5
    row = mc.noise(_readings(rng, _noise(rng, tensor_sigma=np.array([1, 1, 1, 0.0]))), CARD)
    assert row.status == "fail" and "bias2" in row.finding and "part of the model" in row.finding
    row = mc.noise(_readings(rng, _noise(rng, reuse=True)), CARD)
    assert row.status == "fail" and "correlated" in row.finding


def test_an_optimizer_holding_less_noise_than_the_card_fails_without_statistics():
    """The noise multiplier the probe read off the DP optimizer is below the card's: the noise check fails on that
    alone (honest noise at the card's sigma in the readings cannot hide it); equal or more passes to the statistics."""
    rng = np.random.default_rng(5)
    low = _readings(rng, _noise(rng))
    low.probe["noise_multiplier"] = SIGMA / 2
    row = mc.noise(low, CARD)
    assert row.status == "fail" and "noise multiplier" in row.finding and row.values["stated"] == SIGMA / 2
    same = _readings(rng, _noise(rng))
    same.probe["noise_multiplier"] = SIGMA * (1 - 1e-9)  # a float round trip
    assert mc.noise(same, CARD).status == "pass"
    more = _readings(rng, _noise(rng))
    more.probe["noise_multiplier"] = 2 * SIGMA
    assert mc.noise(more, CARD).status == "pass"


def test_sampling_check_names_repeated_sizes_and_a_rate_that_changes_midway():
    rng = np.random.default_rng(3)
    fixed = np.r_[np.full(T - 1, 50), 17]  # shuffled fixed-size batches, the epoch's short last one
    row = mc.sampling(_readings(rng, None, records=fixed), CARD)
    assert row.status == "fail" and "fixed-size batches" in row.finding
    grow = np.r_[rng.binomial(N, Q * 0.8, size=T // 2), rng.binomial(N, Q * 1.2, size=T // 2)]  # mean as the card's
    row = mc.sampling(_readings(rng, None, records=grow), CARD)
    assert row.status == "fail" and "changed during training" in row.finding
    assert mc.sampling(_readings(rng, None), CARD).status == "pass"


def test_coverage_check_reads_what_the_probe_recorded():
    rng = np.random.default_rng(4)
    ok = {"model_given": True, "dp_parameters": 5, "outside": 2, "trainable_outside": [], "changed_outside": [],
          "changed_between_steps": []}
    assert mc.coverage(_readings(rng, None, coverage=ok)).status == "pass"
    moved = {**ok, "changed_outside": [{"name": "head.weight", "kind": "trainable parameter", "step": 3}]}
    row = mc.coverage(_readings(rng, None, coverage=moved))
    assert row.status == "fail" and "head.weight" in row.finding and row.false_alarm == 0.0
    between = {**ok, "changed_between_steps": [{"name": "fc1.weight", "step": 2}]}
    assert "between its steps" in mc.coverage(_readings(rng, None, coverage=between)).finding


def test_a_degenerate_record_fails_its_check_and_never_stops_the_evaluation():
    rng = np.random.default_rng(5)
    z = _noise(rng)
    z["noise_ss_step"][3] = np.nan
    rows = {c.check: c for c in mc.run(_readings(rng, z), CARD)}
    assert rows["noise"].status == "fail" and "cannot be read" in rows["noise"].finding
    # the block without noise: every clip canary's projection exact, a zero standard error
    r = _readings(rng, None)
    sampled = rng.random((T, 8)) < 0.3
    r = mc.Readings(**{**r.__dict__, "clip_projections": sampled.astype(np.float32), "clip_sampled": sampled})
    assert mc.clipping(r, CARD).status == "pass"
    r4 = mc.Readings(**{**r.__dict__, "clip_projections": (4.0 * sampled).astype(np.float32)})
    assert mc.clipping(r4, CARD).status == "fail"


class _Card:
    is_private = True
    claim = type("Claim", (), {"epsilon_value": 8.0})()
    extra = {}


@pytest.mark.parametrize("failed", [True, False])
def test_a_failed_check_decides_the_headline_and_compare_shows_the_checks(failed):
    acct = ClaimAccounting((), {}, 8.0, 8.0, 7.9, "verified", "pld proves it")
    best = TestRow.from_dict({"epsilon_lb": 0.5, "family_confidence": 0.95, "ceiling": 9.0, "delta_kind": "claimed"})
    checks = (CheckRow("noise", "fail" if failed else "pass", "half the noise", 1e-3),
              CheckRow("steps", "pass", "ok", 0.0))
    typed = [MechanismEvidence("whitebox_gradient", "hooks", "block", "DPOptimizer", 1, True, 1e-3, checks)]
    v = verdict.judge(_Card(), acct, verdict.Grounds(best, 9.0, mechanism=typed))
    mech = [e.as_dict() for e in typed]
    assert v.status == ("mechanism-mismatch" if failed else "consistent")
    if failed:
        assert "half the noise" in v.reason and v.without_mechanism == "consistent"
    honest = {"mechanism_checks": [{"attack": "whitebox_gradient", "checks": [
        {"check": "noise", "status": "pass", "finding": "", "false_alarm": 1e-3}]}]}
    rows, reg = compare.mechanism_rows(honest, {"mechanism_checks": mech})
    assert any("`noise` | pass | " + ("fail" if failed else "pass") in r for r in rows)
    assert reg == int(failed)


def test_modes_the_probe_cannot_serve_are_refused_when_it_attaches():
    import torch
    from opacus.optimizers.adaclipoptimizer import AdaClipDPOptimizer
    from opacus.optimizers.optimizer import DPOptimizer

    from dpaudit.api import attach_probe
    from dpaudit.errors import DpauditError

    p = torch.nn.Parameter(torch.zeros(4))
    ada = AdaClipDPOptimizer(torch.optim.SGD([p], lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0,
                             expected_batch_size=4, target_unclipped_quantile=0.5, clipbound_learning_rate=0.2,
                             max_clipbound=2.0, min_clipbound=0.1, unclipped_num_std=1.0)
    with pytest.raises(DpauditError, match="adaptive clipping"):
        attach_probe(ada, sample_rate=0.1, m=10)
    opt = DPOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(64))], lr=0.1), noise_multiplier=1.0,
                      max_grad_norm=1.0, expected_batch_size=4)
    attach_probe(opt, sample_rate=0.1, m=10)
    with pytest.raises(DpauditError, match="one probe per optimizer"):
        attach_probe(opt, sample_rate=0.1, m=10)
    with pytest.raises(DpauditError, match="on_fail"):
        attach_probe(DPOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.zeros(64))], lr=0.1), noise_multiplier=1.0,
                                 max_grad_norm=1.0, expected_batch_size=4), sample_rate=0.1, m=10, on_fail="stop")


def test_fixed_size_batches_stated_by_the_card_are_expected_not_accused():
    """A card whose sampler is "shuffle" (fixed-size batches, poisson_sampling=False): the same fixed sizes the
    Poisson card fails pass, a batch above B = round(q N) fails, deterministically; online, attach_probe(...,
    sampler="shuffle") applies the same rule, and the Poisson e-process's alarm on repeated sizes names it."""
    from dataclasses import replace

    from dpaudit.probe.online import Online

    rng = np.random.default_rng(3)
    fixed = np.r_[np.full(T - 1, 50), 17]
    shuffle_card = replace(CARD, sampler="shuffle")
    row = mc.sampling(_readings(rng, None, records=fixed), shuffle_card)
    assert row.status == "pass" and row.values["fixed_batch"] == 50, row
    larger = fixed.copy()
    larger[7] = 51
    row = mc.sampling(_readings(rng, None, records=larger), shuffle_card)
    assert row.status == "fail" and "more than the fixed batch size B = 50" in row.finding
    on = Online(noise_multiplier=None, tensors=0, sample_rate=Q, dataset_size=N, on_fail=None, sampler="shuffle")
    for b in fixed:
        on.step += 1
        on.sampling_step(int(b))
    assert "sampling" not in on.alarms and on.status(False)["sampling"]["status"] == "ok"
    on.step += 1
    on.sampling_step(60)
    assert on.alarms["sampling"]["step"] == T + 1
    poisson = Online(noise_multiplier=None, tensors=0, sample_rate=Q, dataset_size=N, on_fail=None)
    for b in fixed:
        poisson.step += 1
        poisson.sampling_step(int(b))
    assert "sampler='shuffle'" in poisson.alarms["sampling"]["finding"]
    with pytest.raises(Exception, match="sampler must be"):
        Online(noise_multiplier=None, tensors=0, sample_rate=Q, dataset_size=N, on_fail=None, sampler="random")


def test_a_noise_schedule_that_lowers_sigma_late_is_found_soon_after_the_change():
    """Issue wave 5 · 3/5: 150 steps with more noise than the card (1.3 sigma), then 0.8 sigma. A product started at
    step 1 is buried by the early evidence for the card (it would need about a thousand steps to recover); the
    change-point mixture fires within a few steps of the change. Honest streams keep the level (test above)."""
    rng = np.random.default_rng(5)
    n, alpha = 256, 1e-3
    e, first = sequential.NoiseScale(1), None
    buried = 0.0  # the product started at step 1, at rho = 0.8: what the monitor was before
    for t in range(1, 301):
        scale = 1.3 if t <= 150 else 0.8
        x = rng.chisquare(n) * scale ** 2
        e.update(np.array([x]), np.array([n]))
        buried += -n * np.log(0.8) - 0.5 * x * (0.8 ** -2 - 1)
        if first is None and e.log_e()[0] >= np.log(1 / alpha):
            first = t
    assert first is not None and 150 < first <= 160, first
    assert buried < np.log(1 / alpha)  # the single product never fired


def test_a_batch_rate_that_rises_late_is_found_soon_after_the_change():
    """150 honest steps at the card's q, then 1.6 q: found within 20 steps of the change."""
    rng = np.random.default_rng(6)
    e, first = sequential.BatchSizes(N, Q), None
    for t in range(1, 301):
        e.update(int(rng.binomial(N, Q * (1.0 if t <= 150 else 1.6))))
        if first is None and e.log_e() >= np.log(1 / 1e-3):
            first = t
    assert first is not None and 150 < first <= 170, first


def test_the_change_point_mixture_keeps_its_level_over_long_honest_runs():
    """500 honest runs of 400 steps at alpha = 5%: alarms no more often than the binomial tail allows (Ville)."""
    rng = np.random.default_rng(7)
    alpha, reps, alarms = 0.05, 500, 0
    for _ in range(reps):
        e = sequential.NoiseScale(1)
        x = rng.chisquare(32, size=400)
        for v in x:
            e.update(np.array([v]), np.array([32]))
            if e.log_e()[0] >= np.log(1 / alpha):
                alarms += 1
                break
    assert alarms <= binom.ppf(0.999, reps, alpha), alarms
