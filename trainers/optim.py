"""The base optimizer every method wraps: Adam over the trainable parameters (Li et al. fine-tune with
DP-Adam; the DP part is the Opacus wrapper of :mod:`.mechanism`, not this), or plain SGD (``train.optimizer =
"sgd"``: DP-SGD, Abadi et al.; no momentum, so every step moves each coordinate by lr times its noisy gradient —
the linear update the final-weights score reads best, reports/final_weights). The optimizer is post-processing of
the noisy gradients: it changes no claim."""

from __future__ import annotations

import functools

import torch
from torch import nn

from dpaudit.errors import DpauditError
from dpaudit.options import OPTIMIZERS

FUSED_DEVICES = ("cpu", "cuda")  # where torch's fused Adam runs (the same update, one kernel for every tensor)


def is_head(name: str) -> bool:
    """A classifier's new head (plain ``classifier.*`` or peft's ``...classifier.modules_to_save...``)."""
    return name.startswith("classifier.") or ".classifier." in name


def base(model: nn.Module, lr: float, weight_decay: float = 0.0, head_lr: float | None = None, kind: str = "adam",
         fused: bool = True):
    """(trainable parameters, Adam — or SGD for ``kind = "sgd"`` — over them); a classifier's head gets ``head_lr``
    when it is set. Adam is torch's fused kernel where every parameter allows it, unless ``fused`` is False: for
    parameters that become DTensors after the optimizer is made (``ghost_fsdp`` shards the model afterwards, and
    the fused kernel refuses plain state beside sharded parameters)."""
    if kind not in OPTIMIZERS:
        raise DpauditError(f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise DpauditError("no trainable parameters; check the trainable-parameter choice")
    params = [p for _, p in named]
    make = torch.optim.SGD
    if kind == "adam":  # torch's fused Adam where every parameter allows it: one kernel over all tensors (CPU: 22.6M
        fused = fused and all(p.device.type in FUSED_DEVICES and p.is_floating_point() for p in params)  # params: 20
        make = functools.partial(torch.optim.Adam, fused=True) if fused else torch.optim.Adam  # ms, not 90-105 ms)
    if head_lr is None:
        return params, make(params, lr=lr, weight_decay=weight_decay)
    head = [p for n, p in named if is_head(n)]
    if not head:
        raise DpauditError("train.head_lr is set but the model has no trainable classifier head; remove head_lr "
                           "or use a classifier model (minilm-l6, tiny-bert)")
    body = [p for n, p in named if not is_head(n)]
    groups = ([{"params": body}] if body else []) + [{"params": head, "lr": head_lr}]
    return params, make(groups, lr=lr, weight_decay=weight_decay)
