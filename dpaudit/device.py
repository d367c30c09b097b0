"""Where tensors live: ``auto`` | ``cpu`` | ``cuda`` (or ``cuda:N``) resolved to a torch device, once.

``auto`` is CUDA when a CUDA device is visible (under torchrun, the rank's ``LOCAL_RANK`` device), else the CPU.
Every other module takes the device from the model's parameters (:func:`dpaudit.tokens.model_device`), so the
same code runs on both and a CPU test exercises it.
"""

from __future__ import annotations

import os
import re

from dpaudit.errors import DpauditError

CHOICES = ("auto", "cpu", "cuda")


def check(name: str, where: str = "device") -> str:
    """``name`` if it names a device dpaudit accepts (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else a one-line error."""
    if not isinstance(name, str) or not (name in CHOICES or re.fullmatch(r"cuda:\d+", name)):
        raise DpauditError(f"{where} must be auto, cpu, cuda or cuda:N, got {name!r}")
    return name


def resolve(name: str = "auto", where: str = "device"):
    """The torch device ``name`` stands for on this machine; asking for CUDA where none is visible is an error
    (not a silent fall-back to the CPU)."""
    import torch

    check(name, where)
    if name == "cpu":
        return torch.device("cpu")
    cuda = torch.cuda.is_available()
    if name == "auto" and not cuda:
        return torch.device("cpu")
    if not cuda:
        raise DpauditError(f"{where} = {name!r} asks for CUDA but no CUDA device is visible here; use cpu or auto")
    if name in ("auto", "cuda"):
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", torch.cuda.current_device())))
    index = int(name.split(":")[1])
    if index >= torch.cuda.device_count():
        raise DpauditError(f"{where} = {name!r}: only {torch.cuda.device_count()} CUDA device(s) are visible")
    return torch.device(name)
