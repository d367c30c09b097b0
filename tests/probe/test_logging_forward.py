"""A forward pass outside ``no_grad`` between backward and step (a logging forward, issue wave 5 · 3/5): Opacus
alone raises its own clear message; with the probe attached the same message comes through, not a crash inside
the probe."""

import pytest
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from dpaudit.api import attach_probe


def _step_with_logging_forward(probe: bool):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model, opt, loader = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=data,
                                                      noise_multiplier=1.0, max_grad_norm=1.0)
    if probe:
        attach_probe(opt, sample_rate=loader.sample_rate, model=model, on_fail=None)
    for x, y in loader:
        if len(x) == 0:
            continue
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        model(x)  # the logging forward, outside no_grad
        opt.step()


@pytest.mark.parametrize("probe", [False, True], ids=["opacus-alone", "with-probe"])
def test_opacus_message_comes_through(probe):
    with pytest.raises(ValueError, match="Per sample gradient is not initialized"):
        _step_with_logging_forward(probe)
