"""The Hugging Face Trainer's default max_grad_norm = 1.0 with Opacus' hooks optimizer (issue wave 5 · 3/5): the
Trainer clips the ordinary gradient, which the DP optimizer replaces with the noisy clipped sum, so the trained
weights are bit-identical to max_grad_norm = 0 and the probe passes every check (examples/audit_hf_trainer.py at its
smallest settings, run both ways with one seed). Under ghost clipping the callback refuses it with the reason."""

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from dpaudit.errors import DpauditError

ROOT = Path(__file__).resolve().parents[2]


def test_the_trainers_default_clipping_changes_nothing_and_passes(tmp_path):
    main = runpy.run_path(str(ROOT / "examples" / "audit_hf_trainer.py"))["main"]  # the example, not run as __main__
    small = ["--insecure-rng", "--records", "60", "--epochs", "1", "--canaries", "10", "--references", "20",
             "--probe-canaries", "100"]
    for norm in ("1.0", "0"):
        assert main(["--out", str(tmp_path / norm), "--max-grad-norm", norm, *small]) == 0
    a = load_file(tmp_path / "1.0" / "model" / "model.safetensors")
    b = load_file(tmp_path / "0" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    report = json.loads((tmp_path / "1.0" / "report" / "report.json").read_text())
    (entry,) = report["mechanism_checks"]
    statuses = {c["check"]: c["status"] for c in entry["checks"]}
    assert all(statuses[c] == "pass" for c in ("noise", "sampling", "clipping", "steps", "coverage")), statuses
    assert statuses["divisor"] in ("pass", "not tested")  # one epoch of a few steps: too few to test the divisor


def test_ghost_clipping_with_the_trainers_clipping_is_refused_with_the_reason():
    from opacus.optimizers import DPOptimizerFastGradientClipping

    from dpaudit.probe.hf import ProbeCallback

    p = torch.nn.Parameter(torch.zeros(3))
    ghost = DPOptimizerFastGradientClipping(torch.optim.SGD([p], lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0,
                                            expected_batch_size=4)
    cb = ProbeCallback(sample_rate=0.1, m=10)
    with pytest.raises(DpauditError, match="under ghost clipping is the clipped sum the noise is added to"):
        cb.on_train_begin(SimpleNamespace(max_grad_norm=1.0), None, None, optimizer=ghost)
