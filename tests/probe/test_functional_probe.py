"""The functional probe (dpaudit/probe/functional.py) on a hand-written DP step: two calls around the noise, the
same record and checks as the Opacus adapter. A simulated mechanism whose truth is known: records' gradients of
random norms, clipped (or not: a planted bug), summed, noised, divided; torch tensors and NumPy arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit import accounting, api
from dpaudit.accounting import SubsampledGaussian
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.errors import DpauditError
from dpaudit.probe.functional import FunctionalProbe
from dpaudit.probe.online import ProbeFailure
from tests.probe.test_probe import _checks

N, Q, C, SIGMA, T = 500, 0.08, 1.0, 1.0, 60
SHAPES = {"layer.weight": (24, 16), "layer.bias": (16,), "head.weight": (16, 4)}


def _run(tmp_path, *, bug=None, arrays="torch", seed=0, steps=T, on_fail="warn"):
    """T noisy steps of a hand-written DP-SGD step with the probe in its two places; the card states (q, sigma, C, B)."""
    rng = np.random.default_rng(seed)
    B = Q * N
    probe = api.functional_probe(SHAPES, sample_rate=Q, clipping_norm=C, noise_multiplier=SIGMA,
                                 expected_batch_size=B, m=200, seed=seed, dataset_size=N, on_fail=on_fail)
    q_run = 2 * Q if bug == "wrong-rate" else Q
    common = {k: rng.normal(size=s) for k, s in SHAPES.items()}
    for _ in range(steps):
        b = int(rng.binomial(N, q_run))
        total = {k: np.zeros(s) for k, s in SHAPES.items()}
        for _ in range(b):  # each record's gradient (correlated, as real ones are), norm 0.5 C to 3 C, clipped to C
            g = {k: common[k] + 0.5 * rng.normal(size=s) for k, s in SHAPES.items()}
            norm = np.sqrt(sum(float((v ** 2).sum()) for v in g.values()))
            scale = rng.uniform(0.5, 3.0) * C / norm
            factor = scale if bug == "no-clip" else min(scale, C / norm)
            for k in SHAPES:
                total[k] += factor * g[k]
        clipped = {k: torch.from_numpy(v) for k, v in total.items()} if arrays == "torch" else total
        clipped = probe.add_canaries(clipped, records=b)
        std = SIGMA * C / (2 if bug == "half-noise" else 1)
        div = max(b, 1) if bug == "divisor" else B
        update = {}
        for k in SHAPES:
            noise = rng.normal(0.0, std, SHAPES[k])
            if bug == "noise-some-tensors" and k.endswith("bias"):
                noise[:] = 0.0
            x = np.asarray(clipped[k]) + noise
            update[k] = torch.from_numpy(x / div) if arrays == "torch" else x / div
        probe.observe(update)
    folder = save_with_card(probe, tmp_path / f"run-{bug}-{arrays}-{seed}", q=Q, sigma=SIGMA, steps=steps,
                            clipping_norm=C, batch=B, n=N, method="hand-written")
    return folder, probe


def save_with_card(probe, folder, *, q, sigma, steps, clipping_norm, batch, n, method):
    """The probe's record in ``folder`` beside the card of the run as stated: Poisson rate q, sigma, steps, C, the
    divisor B and N (accounted with PRV at delta 1e-5)."""
    folder.mkdir()
    event = SubsampledGaussian(q, sigma, steps, "poisson")
    eps = accounting.compute([event], 1e-5, "prv").epsilon
    PrivacyCard(claim=Claim(epsilon=eps, delta=1e-5), events=[event], clipping_norm=clipping_norm,
                expected_batch_size=batch, dataset_size=n, method=method).save(folder / "privacy_card.json")
    probe.save(folder)
    return folder


@pytest.mark.parametrize("arrays", ["torch", "numpy"])
def test_an_honest_hand_written_step_passes_every_check(tmp_path, arrays):
    folder, probe = _run(tmp_path, arrays=arrays)
    checks, entry = _checks(folder)
    assert {k: c["status"] for k, c in checks.items()} == {**dict.fromkeys(
        ("noise", "sampling", "clipping", "steps", "divisor"), "pass"), "coverage": "not tested",
        "weights": "not tested"}, checks  # this step keeps no weights: none given to save, none beside the record
    assert entry["mode"] == "functional" and entry["coordinates"] == "model"
    assert all(v["status"] == "ok" for k, v in probe.status().items() if k in ("noise", "sampling", "clipping"))
    # the meter reads the noise the step added, in units of C: sigma per coordinate
    assert checks["noise"]["values"].get("rms", 1.0) == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize("bug,check", [("half-noise", "noise"), ("no-clip", "clipping"), ("divisor", "divisor"),
                                       ("noise-some-tensors", "noise"), ("wrong-rate", "sampling")])
def test_each_planted_bug_fails_the_check_that_names_it(tmp_path, bug, check):
    folder, _ = _run(tmp_path, bug=bug, on_fail=None)
    checks, _ = _checks(folder)
    assert checks[check]["status"] == "fail", checks[check]
    if bug == "noise-some-tensors":
        assert "layer.bias" in checks["noise"]["finding"], checks["noise"]["finding"]


def test_canaries_enter_before_the_noise_at_exactly_c_and_are_read_after_it():
    """Without noise, each sampled inserted canary moves its coordinate of B * update by exactly C."""
    probe = FunctionalProbe([(50,), (30, 2)], sample_rate=0.5, clipping_norm=2.0, noise_multiplier=0.0,
                            expected_batch_size=10.0, m=40, seed=3, on_fail=None)
    for _ in range(5):
        s = probe.add_canaries([torch.zeros(50), torch.zeros(30, 2)], records=0)
        probe.observe([t / 10.0 for t in s])
    c = probe.canaries
    inserted = c.signs > 0
    np.testing.assert_allclose(c.scores[inserted], c.times_sampled[inserted], atol=1e-5)
    np.testing.assert_allclose(c.scores[~inserted], 0.0, atol=1e-6)
    assert probe.records == [0] * 5 and probe.steps == 5


def test_numpy_inputs_come_back_as_numpy_and_read_only_ones_are_copied():
    probe = FunctionalProbe([(8,)], sample_rate=1.0, clipping_norm=1.0, noise_multiplier=1.0,
                            expected_batch_size=4.0, m=4, on_fail=None)
    ro = np.zeros(8)
    ro.flags.writeable = False  # as np.asarray of a JAX array
    out = probe.add_canaries([ro], records=1)
    assert isinstance(out[0], np.ndarray) and out[0] is not ro and not ro.any() and out[0].any()
    probe.observe([out[0] / 4.0])


def test_online_raise_stops_a_loop_without_noise():
    with pytest.raises(ProbeFailure, match="noise"):
        _run_no_noise()


def _run_no_noise():
    probe = FunctionalProbe({"w": (200,)}, sample_rate=0.1, clipping_norm=1.0, noise_multiplier=1.0,
                            expected_batch_size=10.0, m=20, on_fail="raise")
    for _ in range(50):
        s = probe.add_canaries({"w": torch.zeros(200)}, records=10)
        probe.observe({"w": s["w"] / 10.0})


def test_misuse_is_refused_in_one_line():
    p = FunctionalProbe([(4,)], sample_rate=0.5, clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=2.0,
                        m=2, on_fail=None)
    with pytest.raises(DpauditError, match="without add_canaries"):
        p.observe([torch.zeros(4)])
    with pytest.raises(DpauditError, match="shape"):
        p.add_canaries([torch.zeros(5)], records=1)
    with pytest.raises(DpauditError, match="list of 1"):
        p.add_canaries([torch.zeros(4), torch.zeros(4)], records=1)
    with pytest.raises(DpauditError, match="records"):
        p.add_canaries([torch.zeros(4)], records=-1)
    p.add_canaries([torch.zeros(4)], records=1)
    with pytest.raises(DpauditError, match="twice"):
        p.add_canaries([torch.zeros(4)], records=1)
    for kw in ({"clipping_norm": 0.0}, {"expected_batch_size": float("nan")}, {"noise_multiplier": -1.0},
               {"sample_rate": 1.5}):
        args = {"sample_rate": 0.5, "clipping_norm": 1.0, "noise_multiplier": 1.0, "expected_batch_size": 2.0, **kw}
        with pytest.raises(DpauditError):
            FunctionalProbe([(4,)], m=2, **args)
    with pytest.raises(DpauditError, match="shapes"):
        FunctionalProbe([], sample_rate=0.5, clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=2.0)


def test_a_record_is_saved_only_under_a_name_evaluate_reads(tmp_path):
    """The record's file name becomes the test's name in every report: an identifier, or refused before writing."""
    p = FunctionalProbe([(4,)], sample_rate=0.5, clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=2.0,
                        m=2, on_fail=None)
    p.observe(p.add_canaries([torch.zeros(4)], records=1))
    for stem in ("gradient_canaries_**Verdict**", "gradient_canaries_a\nb", "canaries", "gradient_canaries_"):
        with pytest.raises(DpauditError, match="a-z, 0-9 and _"):
            p.save(tmp_path, stem=stem)
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert [f.name for f in p.save(tmp_path, stem="gradient_canaries_dense")][0].startswith("gradient_canaries_dense")
