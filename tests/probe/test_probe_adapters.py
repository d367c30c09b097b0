"""The probe on the loops Opacus 1.6 and Hugging Face Accelerate shape: Opacus' non-wrapping mode
(``make_private(..., wrap_model=False)``: the model stays the user's own, hooks do the per-sample work) and a loop
prepared by ``accelerate`` (``Accelerator.prepare`` around the model, the DP optimizer and the Poisson loader; the
probe attached in one line to the optimizer accelerate returns). Honest runs pass every check; half the noise fails
``noise``; a Transformers model (tiny GPT-2) runs the same way."""

from __future__ import annotations

import pytest
import torch
from opacus import PrivacyEngine
from safetensors.torch import save_model
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit import api
from tests.probe.test_probe import _checks, _plant

N, B, C = 400, 40, 0.5
HONEST = {**dict.fromkeys(("noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"), "pass")}


def _run(tmp_path, *, accelerate: bool, bug=None, steps=40, seed=0):
    torch.manual_seed(seed)
    data = TensorDataset(torch.randn(N, 6) * 3, torch.randint(0, 3, (N,)))
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    engine = PrivacyEngine(accountant="prv")
    hooks, opt, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05), data_loader=DataLoader(data, batch_size=B),
        noise_multiplier=1.0, max_grad_norm=C, poisson_sampling=True, wrap_model=False)
    assert not isinstance(hooks, nn.Module)  # non-wrapping mode: the model stays the user's own
    q = loader.sample_rate  # the DPDataLoader's, before accelerate wraps it
    if bug:
        _plant(opt, bug)
    if accelerate:
        from accelerate import Accelerator

        acc = Accelerator(cpu=True)
        model, step_opt, loader = acc.prepare(model, opt, loader)
        backward = acc.backward
    else:
        step_opt, backward = opt, (lambda loss: loss.backward())
    # one line, on whatever optimizer the loop steps (accelerate's wrapper included)
    probe = api.attach_probe(step_opt, sample_rate=q, m=200, seed=seed, model=model, dataset_size=N, on_fail=None)
    crit, done = nn.CrossEntropyLoss(), 0
    while done < steps:
        for x, y in loader:
            if done == steps:
                break
            backward(crit(model(x), y))
            step_opt.step()
            step_opt.zero_grad()  # PyTorch's order: backward, step, zero_grad
            done += 1
    out = tmp_path / f"run-{accelerate}-{bug}"
    out.mkdir()
    api.card_from_opacus(engine, loader, opt, delta=1e-5).save(out / "privacy_card.json")
    probe.save(out)
    save_model(model, str(out / "model.safetensors"))  # the weights beside the record (accelerate's wrapper too)
    hooks.cleanup()
    return out, probe


@pytest.mark.parametrize("accelerate", [False, True], ids=["non-wrapping", "accelerate"])
def test_an_honest_loop_passes_every_check(tmp_path, accelerate):
    folder, probe = _run(tmp_path, accelerate=accelerate)
    checks, entry = _checks(folder)
    assert {k: c["status"] for k, c in checks.items()} == HONEST, checks
    assert entry["optimizer"] == "DPOptimizer" and probe.steps == 40


@pytest.mark.parametrize("accelerate", [False, True], ids=["non-wrapping", "accelerate"])
def test_half_the_noise_fails_the_noise_check(tmp_path, accelerate):
    folder, _ = _run(tmp_path, accelerate=accelerate, bug="half-noise")
    checks, _ = _checks(folder)
    assert checks["noise"]["status"] == "fail", checks["noise"]
    assert [k for k, c in checks.items() if c["status"] == "fail"] == ["noise"]


def test_a_transformers_model_in_non_wrapping_mode_under_accelerate(tmp_path):
    """A tiny GPT-2 (Transformers) trained as Opacus #794 shapes it: non-wrapping mode, prepared by accelerate, the
    probe attached to the optimizer accelerate returns. Honest: every check passes."""
    from accelerate import Accelerator
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    ids = torch.randint(0, 64, (240, 12))
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                                       tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    engine = PrivacyEngine(accountant="prv")
    hooks, opt, loader = engine.make_private(
        module=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
        data_loader=DataLoader(TensorDataset(ids), batch_size=24), noise_multiplier=1.0, max_grad_norm=1.0,
        poisson_sampling=True, wrap_model=False)
    q = loader.sample_rate
    acc = Accelerator(cpu=True)
    model, opt_acc, loader = acc.prepare(model, opt, loader)
    probe = api.attach_probe(opt_acc, sample_rate=q, m=100, model=model, dataset_size=240, on_fail=None)
    for _ in range(3):
        for (x,) in loader:
            pos = torch.arange(x.shape[1]).expand_as(x)  # per-sequence positions: one row per record for Opacus
            logits = model(input_ids=x, position_ids=pos).logits[:, :-1]
            loss = nn.functional.cross_entropy(logits.transpose(1, 2), x[:, 1:], reduction="none").mean(1).mean()
            acc.backward(loss)
            opt_acc.step()
            opt_acc.zero_grad()
    out = tmp_path / "gpt2"
    out.mkdir()
    api.card_from_opacus(engine, loader, opt, delta=1e-5).save(out / "privacy_card.json")
    probe.save(out)
    acc.unwrap_model(model).save_pretrained(out)  # as an Accelerate script saves a transformers model
    hooks.cleanup()
    checks, _ = _checks(out)
    assert {k: c["status"] for k, c in checks.items()} == HONEST, checks
