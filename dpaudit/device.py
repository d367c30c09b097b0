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


def bf16_autocast(device, requested: str) -> tuple[str, str | None]:
    """(the autocast a run on ``device`` uses for ``train.autocast = requested``, the note saying why it differs;
    None when it does not). A GPU without bfloat16 is refused (the config asks for what the card cannot do); a CPU
    without native bfloat16 (x86 without AVX512-BF16 or AMX; ARM without BF16) trains in float32 instead, with the
    note: PyTorch emulates bf16 there (the demo's baseline: about 24 s a step on an AVX2-only CPU, 0.4 s on a
    2-core CPU with AMX, reports/demo: 511 steps in 205 s). float32 is the more precise of the two, so the run
    is no less correct, only its numbers are not bit-equal to a bf16 run's (the note goes into run.json)."""
    if requested != "bf16":
        return requested, None
    import torch

    if device.type == "cuda":
        if not torch.cuda.is_bf16_supported():
            raise DpauditError(f"train.autocast = 'bf16' needs a GPU with bfloat16 support; {device} has none: "
                               "remove train.autocast (float32) for this device")
        return requested, None
    if device.type != "cpu" or cpu_bf16_native():
        return requested, None
    return "off", ("train.autocast = 'bf16' not applied: this CPU has no native bfloat16 (x86: AVX512-BF16 or "
                   "AMX; ARM: BF16), where PyTorch emulates it many times slower than float32: this run trains "
                   "in float32 instead (weights, gradients and optimizer are float32 either way)")


def cpu_bf16_native() -> bool:
    """Whether this CPU computes bfloat16 matrix products in hardware (AVX512-BF16 or AMX on x86, BF16 on ARM)."""
    import platform

    import torch

    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
