"""The probe's meters as units (dpaudit/probe/meters.py, issue wave 5 · 0/5 item 5), without a training loop:
the noise meter against a for-loop reference on known noise, its statistic against the true sigma, and the
coverage meter on each kind of change it claims to see (and the one its fast path cannot see, caught in full)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dpaudit.probe.meters import Coverage, NoiseMeter, norms


def _params(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.zeros(s).normal_(generator=g) for s in shapes]


def _step(meter, params, noise, scale=1.0):
    """One optimizer step as Opacus takes it: the clipped sum, then the gradient = sum + noise. The meter reads
    the noise back as gradient - sum in float32, so each coordinate carries a rounding error of up to half an
    ulp of |sum + noise| (~2.4e-7 here): the tests compare with tolerances that bound that error."""
    for p in params:
        p.summed_grad = torch.randn(p.shape)
        p.grad = None
    meter.before(scale)
    for p, z in zip(params, noise):
        if z is not None:
            p.grad = p.summed_grad * scale + z
    return meter.after()


def _float32_cross_tolerance(a, b):
    """|(a + e_a)·(b + e_b) - a·b| <= ||e_a|| ||b|| + ||a|| ||e_b|| + ...: with |e| <= 2.4e-7 |a| per coordinate
    (the sums are N(0, 1), so |sum + noise| stays under ~4 in these sizes) the error is under 1e-6 ||a|| ||b||. A
    relative tolerance on the cross term itself is wrong: it sums to near zero, and its rounding error does not."""
    return 1e-6 * float(a.norm() * b.norm())


def test_the_noise_meter_reads_the_noise_at_its_sampled_coordinates():
    torch.manual_seed(0)  # the steps draw their sums from the global generator: the same draws in any test order
    params = _params([(40, 30), (7,), (5, 5)])
    meter = NoiseMeter(params, per_tensor=50, seed=3)
    assert [int(ix.numel()) for ix in meter.index] == [50, 7, 25]  # a small tensor is read whole
    assert all(len(set(ix.tolist())) == ix.numel() for ix in meter.index)  # no coordinate twice
    noises = [[torch.randn(p.shape) for p in params] for _ in range(3)]
    for z in noises:
        ss = _step(meter, params, z)
        ref = [float((zi.reshape(-1)[ix].double() ** 2).sum()) for zi, ix in zip(z, meter.index)]
        assert ss == pytest.approx(ref, rel=1e-6)
    assert meter.ss_step == pytest.approx([sum(float((zi.reshape(-1)[ix].double() ** 2).sum())
                                               for zi, ix in zip(z, meter.index)) for z in noises], rel=1e-6)
    assert meter.n_step == [82, 82, 82]
    flat = [torch.cat([zi.reshape(-1)[ix].double() for zi, ix in zip(z, meter.index)]) for z in noises]
    assert meter.cross_step[0] == 0.0  # no previous step
    for t in (1, 2):
        assert meter.cross_step[t] == pytest.approx(float(flat[t] @ flat[t - 1]),
                                                    abs=_float32_cross_tolerance(flat[t], flat[t - 1]))
    arrays = meter.arrays(scale=2.0)
    assert arrays["noise_ss_step"] == pytest.approx(np.asarray(meter.ss_step) / 4)
    assert list(arrays["noise_n_tensor"]) == [150, 21, 75]


def test_a_reused_draw_shows_in_the_cross_term_and_a_tensor_without_noise_is_left_out():
    torch.manual_seed(1)
    params = _params([(30, 30), (10,)])
    meter = NoiseMeter(params, per_tensor=100, seed=0)
    z = [torch.randn(p.shape) for p in params]
    _step(meter, params, z)
    _step(meter, params, z)  # the same draw again
    assert meter.cross_step[1] == pytest.approx(meter.ss_step[1], rel=1e-6)  # float32 sums: not bit-equal
    ss = _step(meter, params, [torch.randn(30, 30), None])  # the second tensor got no gradient this step
    assert ss[1] == 0.0 and meter.n_step[-1] == 100 and list(meter.steps_tensor) == [3, 2]
    assert meter.cross_step[-1] == 0.0  # another set of tensors: no cross term across it


def test_the_noise_statistic_estimates_the_true_sigma():
    """Noise N(0, (sigma C)^2) at 4 x 1,024 coordinates over 20 steps: the record's mean square in units of C is
    sigma^2 within 5% (its standard error is 0.5%), for two sigmas."""
    torch.manual_seed(2)
    params = _params([(64, 64)] * 4)
    for sigma, C in ((0.7, 0.1), (2.0, 1.0)):
        meter = NoiseMeter(params, per_tensor=1024, seed=1)
        for _ in range(20):
            _step(meter, params, [torch.randn(p.shape) * sigma * C for p in params], scale=1.0)
        a = meter.arrays(C)
        assert a["noise_ss_step"].sum() / a["noise_n_step"].sum() == pytest.approx(sigma ** 2, rel=0.05)


def test_a_snapshot_restores_the_meter_readings():
    torch.manual_seed(3)
    params = _params([(20, 20)])
    meter = NoiseMeter(params, per_tensor=64, seed=2)
    _step(meter, params, [torch.randn(20, 20)])
    state = meter.snapshot()
    other = NoiseMeter(params, per_tensor=64, seed=2)
    other.restore(state)
    assert other.ss_step == meter.ss_step and list(other.steps_tensor) == list(meter.steps_tensor)
    assert torch.equal(other.index[0], meter.index[0])  # the same coordinates from the same seed


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(3, 2)
        self.norm = nn.BatchNorm1d(2)


def test_coverage_sees_each_change_it_claims_to():
    torch.manual_seed(0)
    net = _Net()
    dp = list(net.a.parameters())
    cov = Coverage(net, dp)
    outside = {n for n, _, _ in cov.outside}
    assert {"b.weight", "b.bias", "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var"} <= outside
    assert set(cov.trainable_outside) == {"b.weight", "b.bias", "norm.weight", "norm.bias"}
    assert not cov.armed and cov.before_noise(1) == []
    assert cov.after_step(1) == [] and cov.armed
    with torch.no_grad():
        net.b.weight += 0.1  # a second optimizer steps a parameter outside the DP one
    assert cov.after_step(2) == ["b.weight"]
    with torch.no_grad():
        net.a.bias += 0.1  # a hand-written update of a DP parameter between two DP steps
    assert cov.before_noise(3) == ["a.bias"]
    assert cov.after_step(3) == []  # each change named once
    with torch.no_grad():
        net.norm.running_mean[0] = -net.norm.running_mean[0] + 1.0  # a buffer moved
    assert cov.after_step(4) == ["norm.running_mean"]
    rec = cov.record()
    assert rec["dp_parameters"] == rec["dp_parameters_of_the_model"] == 2
    assert {(c["name"], c["step"]) for c in rec["changed_outside"]} == {("b.weight", 2), ("norm.running_mean", 4)}
    assert rec["changed_between_steps"] == [{"name": "a.bias", "step": 3}]


def test_a_change_that_keeps_every_norm_is_caught_in_full_at_the_end():
    """The per-step check compares norms (one fused call); a sign flip keeps the norm, so it is left to the full
    float64 fingerprint taken when the record is written."""
    torch.manual_seed(1)
    net = _Net()
    cov = Coverage(net, list(net.a.parameters()))
    cov.after_step(1)
    with torch.no_grad():
        net.b.bias[0] = -net.b.bias[0]
    assert cov.after_step(2) == []  # the norm did not move
    cov.final(2)
    assert [c["name"] for c in cov.record()["changed_outside"]] == ["b.bias"]


def test_norms_are_every_tensors_norm_across_dtypes():
    ts = [torch.randn(5), torch.randn(3, 3, dtype=torch.float64), torch.arange(4)]
    ref = [float(torch.linalg.vector_norm(t.double())) for t in ts]
    assert norms(ts).tolist() == pytest.approx(ref, rel=1e-6)
    assert norms([]).numel() == 0
