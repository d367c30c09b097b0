"""The privacy mechanism of the engine, one per privacy unit, both Opacus ``DPOptimizer``s.

* **record**: Opacus' ``PrivacyEngine.make_private`` — per-sample gradients (hooks or ghost clipping),
  Poisson sampling at q = B / N, clipping at C, noise sigma * C once per logical batch, the noisy sum
  divided by the expected batch size B (Li et al., Alg. 1).
* **user**: :class:`UserDPOptimizer` — Opacus computes per-record gradients, the unit step sums them into
  one gradient per sampled user (``p.grad_sample`` then holds one row per *user*), this optimizer clips
  each user's whole gradient to C, and Opacus' own noise, scaling and step run unchanged (Chua et al.,
  Alg. 2). Secure RNG, device placement and the noise path are therefore the same for both units.

The noise is a third axis (:mod:`.noise`): it is installed on either optimizer without touching the loop.
"""

from __future__ import annotations

import sys

import torch
from opacus.optimizers import DPOptimizer
from torch import nn

from dpaudit import opacus_private as op
from dpaudit.errors import DpauditError
from dpaudit.tokens import model_device
from dpaudit.trainers import noise as noise_axis
from dpaudit.trainers import step_failure
from dpaudit.trainers.clip_stats import unit_norms


def noise_generator(seed: int, device: torch.device) -> torch.Generator:
    """The seeded noise stream (seed + 1, independent of the data sampler), on the parameters' device."""
    return torch.Generator(device=device).manual_seed(seed + 1)


def record_level(model: nn.Module, optimizer, loader, *, sigma: float, clipping_norm: float, grad_sample_mode: str,
                 seed: int, noise=None):
    """Opacus wrapping for record-level DP. Returns (module, DP optimizer, ghost criterion or None, Poisson
    loader). The loader's ``batch_size`` B is the expected batch: records are sampled at q = B / N and the noisy
    sum is divided by B, the mechanism the card states (:func:`exact_rate`)."""
    from opacus import PrivacyEngine

    bk = grad_sample_mode == "bk" and _bk_supported(model)
    opacus_mode = "ghost" if grad_sample_mode == "bk" else grad_sample_mode
    check_clippable(model, opacus_mode)
    engine = PrivacyEngine(accountant="prv", secure_mode=False)  # our accounting is separate (dpaudit.accounting)
    device = model_device(model)
    crit = nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")
    try:
        out = engine.make_private(module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=sigma,
                                  max_grad_norm=clipping_norm, poisson_sampling=True, loss_reduction="mean",
                                  grad_sample_mode=opacus_mode, criterion=crit,
                                  noise_generator=noise_generator(seed, device))
    except Exception as e:  # noqa: BLE001 - Opacus refusing a layer when it wraps the model (trainable buffers)
        told = step_failure.explained(e, f"wrapping the model for per-sample gradients ({opacus_mode} mode)")
        if told is None:
            raise
        raise told from None
    module, dp_opt, crit, dp_loader = out if opacus_mode == "ghost" else (*out[:2], None, out[2])
    if bk:  # Opacus' ghost optimizer, loader and noise; the clipped sum from one book-keeping backward instead
        from dpaudit.trainers.bk_clipping import BKLoss, BookKeeping, optimizer_like

        module.remove_hooks()
        module = BookKeeping(op.wrapped_module(module), clipping_norm)
        crit = BKLoss(module)
        dp_opt = optimizer_like(dp_opt)
    exact_rate(dp_loader, dp_opt, loader.batch_size, len(loader.dataset))
    noise_axis.install(dp_opt, noise)
    return module, dp_opt, crit, dp_loader


def _bk_supported(model: nn.Module) -> bool:
    """Whether book-keeping clipping handles every trainable layer; else one line on stderr, and Opacus' ghost
    clipping (the same optimizer, loader and noise) clips instead."""
    from dpaudit.trainers.bk_clipping import unsupported

    why = unsupported(model)
    if why is not None:
        print(f"grad_sample_mode = 'bk': {why}, which book-keeping clipping does not support; Opacus' ghost "
              "clipping clips this run instead", file=sys.stderr)
    return why is None


def check_clippable(model: nn.Module, grad_sample_mode: str) -> None:
    """One line naming the first trainable layer Opacus cannot give per-sample gradients to (its validator:
    batch norm, layers with trainable buffers, ...), before any wrapping; the fix is to freeze it or replace it."""
    from opacus.validators import ModuleValidator

    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        first = str(errors[0]).strip().splitlines()[0].split(". ")[0].rstrip(".")
        raise DpauditError(f"Opacus cannot clip this model per sample ({grad_sample_mode} mode): {first}; freeze that "
                           "layer (train.trainable = 'lora') or use a model without it")


def exact_rate(dp_loader, dp_opt, batch: int, n: int) -> None:
    """Sample at q = B / N and average over B. Opacus derives both from the number of batches of the loader it
    wraps: q = 1 / ceil(N / B) and an expected batch of int(N q), so where B does not divide N it samples less
    often than the card's q and divides by fewer than B (3,087 records at B = 256: q 0.0769 instead of 0.0829,
    divided by 237: every noisy update 8% larger than the card's sigma C / B says, which the white-box noise
    check, dpaudit/audit/noise_check.py, showed). The torchrun path (trainers/distributed.py) samples at q too."""
    q = batch / n
    dp_loader.sample_rate = q
    dp_loader.batch_sampler.sample_rate = q
    dp_opt.expected_batch_size = batch


class UserDPOptimizer(DPOptimizer):
    """A DPOptimizer whose units are users: ``p.grad_sample`` holds one aggregated gradient per sampled user
    (shape (users, *p.shape)); each user's gradient over all parameters together is clipped to C and the
    clipped gradients are summed. Noise (sigma * C), the division by the expected number of users B and
    the step are Opacus'."""

    def clip_and_accumulate(self):
        grads = [p.grad_sample for p in self.params]
        for p, g in zip(self.params, clip_units(grads, self.max_grad_norm)):
            p.summed_grad = g if p.summed_grad is None else p.summed_grad + g


def clip_units(unit_grads: list[torch.Tensor], C: float) -> list[torch.Tensor]:
    """Clip each unit's whole gradient (row i of every tensor together) to norm C and sum over units; the
    clip factor is Opacus' min(1, C / (norm + 1e-6))."""
    norms = unit_norms(unit_grads)
    factor = (C / (norms + 1e-6)).clamp(max=1.0)
    return [(G * factor.view(-1, *([1] * (G.dim() - 1)))).sum(0) for G in unit_grads]


def user_level(model: nn.Module, optimizer, *, sigma: float, clipping_norm: float, expected_users: int, seed: int,
               noise=None, grad_sample_mode: str = "hooks"):
    """(per-record gradient module, user-level DP optimizer) around ``model`` and ``optimizer``; with
    ``grad_sample_mode = "bk"`` (every trainable layer supported) a book-keeping module that clips each user's
    summed gradient from one backward (units.user_bk_step) and Opacus' ghost optimizer for the noise."""
    from opacus import GradSampleModule

    device = model_device(model)
    if grad_sample_mode == "bk" and _bk_supported(model):
        from dpaudit.trainers.bk_clipping import BKOptimizer, BookKeeping

        dp_opt = BKOptimizer(optimizer, noise_multiplier=sigma, max_grad_norm=clipping_norm,
                             expected_batch_size=expected_users, loss_reduction="mean",
                             generator=noise_generator(seed, device))
        noise_axis.install(dp_opt, noise)
        return BookKeeping(model, clipping_norm), dp_opt
    try:
        gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    except Exception as e:  # noqa: BLE001 - as in record_level
        told = step_failure.explained(e, "wrapping the model for per-sample gradients (hooks mode)")
        if told is None:
            raise
        raise told from None
    dp_opt = UserDPOptimizer(optimizer, noise_multiplier=sigma, max_grad_norm=clipping_norm,
                             expected_batch_size=expected_users, loss_reduction="mean",
                             generator=noise_generator(seed, device))
    noise_axis.install(dp_opt, noise)
    return gsm, dp_opt


def release(module: nn.Module) -> nn.Module:
    """The plain model inside an Opacus wrapper, hooks removed (for save_pretrained)."""
    if hasattr(module, "remove_hooks"):
        module.remove_hooks()
    inner = getattr(module, "_module", module)
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    return inner.module if isinstance(inner, DPDDP) else inner  # torchrun: the model inside DPDDP
