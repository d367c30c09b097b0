"""The noise axis of the engine: what is added to the clipped sum of a logical batch.

A noise is any object with ``sample(reference, generator, secure_mode) -> Tensor`` (same shape, device and
dtype as ``reference``, the clipped sum of one parameter). :func:`install` puts it on an Opacus
``DPOptimizer`` (record- or user-level, :mod:`.mechanism`), replacing only the draw: clipping, the
division by the expected batch size, white-box canaries (which wrap ``add_noise``) and the step stay
Opacus'. ``None`` keeps Opacus' own Gaussian path untouched (sigma * C per coordinate), which is what the
Gaussian methods use; the Laplace-mixture noise of LMO-DP plugs in here (docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol

import torch


class Noise(Protocol):
    def sample(self, reference: torch.Tensor, generator: torch.Generator | None, secure_mode: bool) -> torch.Tensor:
        ...


class Gaussian:
    """Gaussian noise of standard deviation ``std`` (= sigma * C) drawn by Opacus' own generator function
    (including its secure-mode construction), for methods that want it explicitly."""

    def __init__(self, std: float):
        self.std = float(std)

    def sample(self, reference, generator, secure_mode):
        from opacus.optimizers.optimizer import _generate_noise

        return _generate_noise(std=self.std, reference=reference, generator=generator, secure_mode=secure_mode)


def install(optimizer, noise: Noise | None) -> None:
    """Make ``optimizer.add_noise`` draw from ``noise`` (no-op for None: Opacus' Gaussian path)."""
    if noise is None:
        return
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    def add_noise():
        for p in optimizer.params:
            _check_processed_flag(p.summed_grad)
            p.grad = (p.summed_grad + noise.sample(p.summed_grad, optimizer.generator, optimizer.secure_mode)).view_as(p)
            _mark_as_processed(p.summed_grad)

    optimizer.add_noise = add_noise
