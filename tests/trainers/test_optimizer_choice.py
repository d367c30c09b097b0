"""train.optimizer (trainers/optim.py): Adam by default, plain SGD for DP-SGD; a DP-SGD step moves every trainable
coordinate by exactly -lr times the released noisy gradient (no state, no momentum), and a wrong name is one line."""

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit.errors import DpauditError
from dpaudit.trainers import engine, mechanism, optim


def test_the_choice_builds_the_named_optimizer_and_refuses_others():
    model = nn.Linear(3, 2)
    assert isinstance(optim.base(model, 1e-3)[1], torch.optim.Adam)
    _, sgd = optim.base(model, 0.5, kind="sgd")
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0 and sgd.defaults["lr"] == 0.5
    with pytest.raises(DpauditError, match="train.optimizer must be one of adam, sgd"):
        optim.base(model, 1e-3, kind="rmsprop")
    with pytest.raises(DpauditError, match="train.optimizer must be one of adam, sgd, got 'momentum'"):
        engine.EngineConfig(optimizer="momentum")
    assert engine.EngineConfig().optimizer == "adam"


def test_a_dp_sgd_step_is_minus_lr_times_the_noisy_clipped_mean():
    """The update read back from the weights equals -lr x (clipped sum + the optimizer's own noise) / B, the
    noise replayed from the same generator seed: the linear update the final-weights score assumes."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1, bias=False)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    start = model.weight.detach().clone()
    _, base = optim.base(model, 0.7, kind="sgd")
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    module, opt, _, _ = mechanism.record_level(model, base, loader, sigma=0.5, clipping_norm=0.1,
                                               grad_sample_mode="hooks", seed=3)
    opt.zero_grad()
    nn.functional.mse_loss(module(x), y, reduction="sum").backward()
    per = module._module.weight.grad_sample  # (8, 1, 4) per-example gradients
    norms = per.flatten(1).norm(dim=1)
    clipped = (per * (0.1 / (norms + 1e-6)).clamp(max=1.0).view(-1, 1, 1)).sum(0)
    gen = mechanism.noise_generator(3, torch.device("cpu"))  # the mechanism's own noise generator, replayed
    opt.step()
    moved = (model.weight.detach() - start) / -0.7 * 8  # = clipped sum + noise
    assert float(norms.min()) > 0.1  # every example clipped
    want = torch.normal(0.0, 0.5 * 0.1, clipped.shape, generator=gen)  # Opacus' draw: N(0, (sigma C)^2)
    assert torch.allclose(moved, clipped + want, atol=1e-5)  # the step is exactly -lr x the released gradient / B


def test_adam_is_torchs_fused_kernel_and_steps_as_the_per_tensor_one():
    """Adam runs fused where every parameter allows it (CPU and CUDA): the same update as the per-tensor loop, to
    float32 rounding, over a few steps with a head of its own rate."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3))
    ref = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3))
    ref.load_state_dict(model.state_dict())
    _, opt = optim.base(model, 1e-2, weight_decay=0.01)
    assert opt.defaults["fused"] is True
    plain = torch.optim.Adam(ref.parameters(), lr=1e-2, weight_decay=0.01)
    for step in range(5):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
        for net, o in ((model, opt), (ref, plain)):
            o.zero_grad()
            net(x).pow(2).sum().backward()
            o.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
