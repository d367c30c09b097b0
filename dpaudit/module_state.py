"""A user's torch modules handed back as they were given: dpaudit scores in eval mode and may move weights to a
device, and neither may leak into the user's own training afterwards. No heavy imports (torch is only touched
through the modules given)."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def as_given(*modules):
    """Within the block the modules may be put in eval mode and moved; after it (an error too) every submodule's
    train/eval mode and the device of the weights are as they were. Anything that is not a module is ignored
    (None, a folder path)."""
    kept = []
    for m in modules:
        if hasattr(m, "modules") and hasattr(m, "parameters"):
            first = next(iter(m.parameters()), None)
            kept.append((m, {sub: sub.training for sub in m.modules()}, None if first is None else first.device))
    try:
        yield
    finally:
        for m, modes, device in kept:
            first = next(iter(m.parameters()), None)
            if device is not None and first is not None and first.device != device:
                m.to(device)
            for sub, training in modes.items():
                sub.training = training
