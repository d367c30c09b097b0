"""Mixed precision as users write it, the probe attached as the README says (a hostile round, 2026-12-02): bf16
autocast and a bf16 model train and pass every check the gate reads; fp16 autocast with a GradScaler diverges under
Opacus whether the probe is attached or not (the per-sample gradients of the scaled loss overflow), and the probe
then refuses to save a record of non-finite values, saying the run diverged, rather than a record the gate would
read as evidence."""

from __future__ import annotations

import warnings

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api
from dpaudit.errors import DpauditError
from dpaudit.evaluation import evidence, scoring
from dpaudit.gate import mechanism_rules

N, B, EPOCHS = 500, 20, 4


def _train(kind: str, folder, probe: bool = True):
    torch.manual_seed(0)
    x = torch.randint(0, 64, (N, 8))
    y = (x[:, 0] >= 32).long()
    model = nn.Sequential(nn.Embedding(64, 16), nn.Flatten(), nn.Linear(128, 16), nn.ReLU(), nn.Linear(16, 2))
    if kind == "bf16-model":
        model = model.to(torch.bfloat16)
    engine = PrivacyEngine(accountant="prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                                                 data_loader=DataLoader(TensorDataset(x, y), batch_size=B),
                                                 noise_multiplier=1.0, max_grad_norm=1.0)
    p = api.attach_probe(opt, sample_rate=loader.sample_rate, m=100, seed=0, dataset_size=N, model=model) \
        if probe else None
    scaler = torch.amp.GradScaler("cpu") if kind == "fp16-scaler" else None
    for _ in range(EPOCHS):
        for xb, yb in loader:
            if len(xb) == 0:
                continue
            opt.zero_grad()
            if kind in ("bf16-autocast", "fp16-scaler"):
                with torch.autocast("cpu", dtype=torch.bfloat16 if kind == "bf16-autocast" else torch.float16):
                    loss = nn.functional.cross_entropy(model(xb), yb)
            else:
                loss = nn.functional.cross_entropy(model(xb).float(), yb)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
    return model, p, api.card_from_opacus(engine, loader, opt, delta=1e-5, method="mixed-precision")


@pytest.mark.parametrize("kind", ["bf16-autocast", "bf16-model"])
def test_bf16_trains_and_passes_every_check(kind, tmp_path):
    model, probe, card = _train(kind, tmp_path)
    probe.save(tmp_path)
    from safetensors.torch import save_model

    save_model(model, str(tmp_path / "model.safetensors"))  # bf16-model: stored as BF16, the fingerprint's float32
    checks = [e.as_dict() for e in evidence.mechanism_checks(scoring.whitebox(tmp_path), card)]
    statuses = {k["check"]: k["status"] for c in checks for k in c["checks"]}
    assert set(statuses) >= {"noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"}
    assert set(statuses.values()) == {"pass"}, statuses
    assert mechanism_rules.failures("run", {"mechanism_checks": checks}, None, False) == []


def test_fp16_with_a_grad_scaler_diverges_and_the_probe_saves_no_record_of_it(tmp_path):
    alone, _, _ = _train("fp16-scaler", tmp_path, probe=False)
    assert not all(torch.isfinite(p).all() for p in alone.parameters())  # Opacus alone: the run diverged
    _, probe, _ = _train("fp16-scaler", tmp_path)
    with pytest.raises(DpauditError, match="NaN or infinity.*diverged.*GradScaler diverges under Opacus, bf16 does not"):
        probe.save(tmp_path)
    assert not list(tmp_path.glob("gradient_canaries*"))
