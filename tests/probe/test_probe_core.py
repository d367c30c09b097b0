"""What every probe adapter shares (dpaudit/probe/core.py, issue wave 5 · 0/5 item 5), as units: driven through the
thinnest adapter (the functional probe: two calls, no optimizer), each behaviour of the core on hand-made steps —
the clipped-sum bound at the step it breaks, the record's shape, a snapshot that resumes to the same record, and
the save refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.errors import DpauditError
from dpaudit.probe.functional import FunctionalProbe

SHAPES = [(30,), (6, 5)]
C, SIGMA, B = 1.0, 1.0, 8.0


def _probe(**kw):
    return FunctionalProbe(SHAPES, sample_rate=0.1, clipping_norm=C, noise_multiplier=SIGMA, expected_batch_size=B,
                           m=20, seed=4, on_fail=None, **kw)


def _steps(probe, rng, n, over_at=None):
    """n steps of b = 5 records whose clipped sum has norm 0.9 b C (1.5 b C at step ``over_at``)."""
    for t in range(1, n + 1):
        b = 5
        parts = [torch.from_numpy(rng.normal(size=s)) for s in SHAPES]
        norm = float(torch.sqrt(sum((p ** 2).sum() for p in parts)))
        scale = (1.5 if t == over_at else 0.9) * b * C / norm
        clipped = probe.add_canaries([p * scale for p in parts], records=b)
        probe.observe([(s + SIGMA * C * torch.from_numpy(rng.normal(size=s.shape))) / B for s in clipped])


def test_the_clipped_sum_bound_fails_at_the_step_it_breaks_and_only_then():
    probe = _probe()
    _steps(probe, np.random.default_rng(0), 6, over_at=4)
    st = probe.status()
    assert st["clipping"]["status"] == "fail" and st["clipping"]["step"] == 4, st["clipping"]
    assert "1.5 b C" in st["clipping"]["finding"]
    honest = _probe()
    _steps(honest, np.random.default_rng(0), 6)
    assert honest.status()["clipping"]["status"] == "ok"


def test_the_record_states_every_step_once():
    probe = _probe()
    _steps(probe, np.random.default_rng(1), 7)
    r = probe.readings()
    assert probe.steps == r["steps"] == 7 and r["online"]["steps"] == 7
    a = r["arrays"]
    assert a["records_per_step"].tolist() == [5] * 7
    assert len(a["sum_ratio"]) == len(a["noise_ss_step"]) == len(a["noise_n_step"]) == 7
    assert np.allclose(a["sum_ratio"], 0.9, atol=1e-6)  # ||clipped sum|| / (b C), the canaries not counted
    assert (r["sample_rate"], r["clipping_norm"], r["noise_multiplier"], r["divisor"]) == (0.1, C, SIGMA, B)
    assert len(r["run_id"]) == 32


def test_a_snapshot_resumes_to_the_record_of_the_run_that_was_not_interrupted():
    whole = _probe()
    _steps(whole, np.random.default_rng(2), 4)
    tensors: dict = {}
    state = whole.snapshot("probe", tensors)
    resumed = _probe()
    resumed.restore("probe", json.loads(json.dumps(state)), tensors)
    for p in (whole, resumed):
        _steps(p, np.random.default_rng(3), 3)
    a, b = whole.readings(), resumed.readings()
    assert a["run_id"] == b["run_id"] and a["steps"] == b["steps"] == 7
    for key in ("records_per_step", "sum_ratio", "noise_ss_step", "noise_n_step", "noise_cross_step"):
        np.testing.assert_allclose(a["arrays"][key], b["arrays"][key], rtol=1e-12, err_msg=key)
    np.testing.assert_allclose(whole.canaries.scores, resumed.canaries.scores, rtol=1e-12)


def test_save_refuses_what_evaluate_would_refuse_and_writes_nothing(tmp_path):
    probe = _probe()
    with pytest.raises(DpauditError, match="no optimizer step"):
        probe.save(tmp_path)
    with pytest.raises(DpauditError, match="not a folder"):
        probe.save(tmp_path / "missing")
    _steps(probe, np.random.default_rng(5), 2)
    probe.sum_ratio[-1] = float("nan")  # a diverged run's reading
    with pytest.raises(DpauditError, match="NaN or infinity"):
        probe.save(tmp_path)
    assert list(tmp_path.iterdir()) == []
    probe.sum_ratio[-1] = 0.9
    written = probe.save(tmp_path)
    assert {p.name for p in written} <= {p.name for p in tmp_path.iterdir()} and probe.saved_to == tmp_path
