"""Record-level DP training of a model sharded over the torchrun ranks: Opacus' ghost clipping under FSDP2
(``train.grad_sample_mode = "ghost_fsdp"``, docs/scaling.md).

Each rank holds 1/W of every parameter, gradient and Adam state (``torch.distributed.fsdp.fully_shard`` on every
layer Opacus can clip, as Opacus' ``FSDP2Wrapper``). The mechanism is the data-parallel path's
(trainers/distributed.py): record i lives on rank i mod W, every rank Poisson-samples its shard at q = B / N from
its own stream each logical step, clips its records' gradients to C by ghost clipping (norms from activations and
backprops, no per-sample gradients); FSDP's reduce-scatter averages the clipped sums over the ranks, and
Opacus' ``FSDPOptimizerFastGradientClipping`` adds N(0, σ²C²)/W to each rank's own shard and divides by the local
expected batch B / W, so every coordinate of the update is (Σ clipped)/B + N(0, σ²C²/B²): one process's update.
The noise generator has the same seed on every rank and draws the full-size noise of each parameter, of which
each rank adds its own slice: the noise is exactly the noise one process would add, never the same draw on two
coordinates.

An empty local batch still takes part in the step (FSDP's collectives need every rank): it runs one record with
no target tokens, whose loss and gradient are zero.

Supported: private record-level ``dp_adam`` with ``trainable = "full"`` on a Hugging Face model of linear,
embedding and norm layers (tested: Llama-style); one line before any work otherwise (GPT-2's Conv1D, whose
per-example norms under FSDP were measured wrong, a layer Opacus cannot clip, tied weights, LoRA, white-box
gradient canaries, other methods). After training, rank 0 gathers the full weights into an unsharded copy of the model for the checkpoint.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from dpaudit.errors import DpauditError


def check_layers(model: nn.Module) -> None:
    """Layers Opacus cannot clip per sample are refused as in one process (mechanism.check_clippable); tied weights
    cannot be sharded under ghost clipping; the unsharded copy for the checkpoint needs a Hugging Face config."""
    from dpaudit.trainers import mechanism

    mechanism.check_clippable(model, "ghost_fsdp")
    for name, module in model.named_modules():
        # GPT-2's Conv1D has no ghost norm sampler; Opacus' functorch fallback on sharded weights gave per-example
        # norms that disagree with the for-loop reference (tests/trainers/test_fsdp.py), so it is refused, not approximated
        if type(module).__name__ == "Conv1D" and any(p.requires_grad for p in module.parameters(recurse=False)):
            raise DpauditError(f"grad_sample_mode = 'ghost_fsdp' cannot clip layer {name!r} (GPT-2's Conv1D) per sample "
                               "under FSDP; use a model of nn.Linear layers (Llama, Qwen2, Mistral, BERT) or train "
                               "GPT-2 data-parallel with grad_sample_mode = 'hooks'")
    seen: dict[int, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if p.requires_grad and id(p) in seen:
            raise DpauditError(f"grad_sample_mode = 'ghost_fsdp': {name!r} shares its weights with {seen[id(p)]!r}; "
                               "set train.tied_embeddings = 'untie'")
        seen[id(p)] = name
    if not hasattr(model, "config"):
        raise DpauditError("grad_sample_mode = 'ghost_fsdp' needs a Hugging Face model (its config rebuilds the "
                           "unsharded model for the checkpoint)")


class Sharded:
    """The sharded model with what releasing it needs: an unsharded skeleton of it on the meta device."""

    def __init__(self, module, skeleton):
        self.module, self.skeleton = module, skeleton


def record_level(model: nn.Module, optimizer, dataset, *, sigma: float, clipping_norm: float,
                 expected_batch_size: int, sample_rate: float, seed: int):
    """(ghost-clipping module over the FSDP-sharded model, FSDP DP optimizer, ghost criterion, this rank's Poisson
    loader, :class:`Sharded` for :func:`release`). ``optimizer`` is rebuilt over the sharded parameters with
    its param groups and settings."""
    from opacus.grad_sample.grad_sample_module_fast_gradient_clipping_fsdp import (
        GradSampleModuleFastGradientClippingFSDP,
    )
    from opacus.optimizers import FSDPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping
    from opacus.utils.fsdp_utils import FSDP2Wrapper

    from dpaudit.trainers import distributed, mechanism

    _, size = distributed.world()
    if size <= 1:
        raise DpauditError("grad_sample_mode = 'ghost_fsdp' shards the model over torchrun ranks; run under torchrun "
                           "--nproc_per_node N (N >= 2), or use 'ghost' in one process")
    check_layers(model)
    device = next(model.parameters()).device
    with torch.device("meta"):
        skeleton = type(model)(model.config)
    names = {id(p): n for n, p in model.named_parameters()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "names": [names[id(p)] for p in g["params"]]}
              for g in optimizer.param_groups]
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    sharded = FSDP2Wrapper(model)
    params = dict(sharded.named_parameters())
    for n in frozen:
        params[n].requires_grad_(False)
    opt = type(optimizer)([{**{k: v for k, v in g.items() if k != "names"}, "params": [params[n] for n in g["names"]]}
                           for g in groups])
    module = GradSampleModuleFastGradientClippingFSDP(sharded, batch_first=True, loss_reduction="mean",
                                                      max_grad_norm=clipping_norm)
    dp_opt = FSDPOptimizerFastGradientClipping(opt, noise_multiplier=sigma, max_grad_norm=clipping_norm,
                                               expected_batch_size=expected_batch_size / size, loss_reduction="mean",
                                               generator=mechanism.noise_generator(seed, device))
    crit = DPLossFastGradientClipping(module, dp_opt, nn.CrossEntropyLoss(ignore_index=-100, reduction="mean"),
                                      loss_reduction="mean")
    return module, dp_opt, crit, distributed.shard_loader(dataset, sample_rate, seed), Sharded(sharded, skeleton)


def placeholder(dataset) -> list[torch.Tensor]:
    """One record with no target tokens: what a rank with an empty local batch runs (zero loss and gradient), so
    that FSDP's collectives see every rank."""
    row = [t[:1].clone() for t in dataset.tensors]
    row[-1].fill_(-100)  # targets
    return row


def release(sharded: Sharded) -> nn.Module:
    """The trained weights, gathered from every rank, in an unsharded copy of the model on rank 0 (every rank must
    call this; the other ranks get the sharded model back and write nothing)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from dpaudit.trainers import distributed

    full = get_model_state_dict(sharded.module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not distributed.is_main():
        return sharded.module
    model = sharded.skeleton
    model.load_state_dict(full, assign=True)
    model.generation_config = getattr(sharded.module, "generation_config", model.generation_config)
    return model.train(False)
