"""The base optimizer every method wraps: Adam over the trainable parameters (Li et al. fine-tune with
DP-Adam; the DP part is the Opacus wrapper of :mod:`.mechanism`, not this)."""

from __future__ import annotations

import torch
from torch import nn

from dpaudit.errors import DpauditError


def is_head(name: str) -> bool:
    """A classifier's new head (plain ``classifier.*`` or peft's ``...classifier.modules_to_save...``)."""
    return name.startswith("classifier.") or ".classifier." in name


def adam(model: nn.Module, lr: float, weight_decay: float = 0.0, head_lr: float | None = None):
    """(trainable parameters, Adam over them); a classifier's head gets ``head_lr`` when it is set."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise DpauditError("no trainable parameters; check the trainable-parameter choice")
    params = [p for _, p in named]
    if head_lr is None:
        return params, torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    head = [p for n, p in named if is_head(n)]
    if not head:
        raise DpauditError("train.head_lr is set but the model has no trainable classifier head; remove head_lr "
                           "or use a classifier model (minilm-l6, tiny-bert)")
    body = [p for n, p in named if not is_head(n)]
    groups = ([{"params": body}] if body else []) + [{"params": head, "lr": head_lr}]
    return params, torch.optim.Adam(groups, lr=lr, weight_decay=weight_decay)
