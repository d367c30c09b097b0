"""Data-parallel DP training under ``torchrun`` (docs/scaling.md): one logical batch spread over the ranks, its
noise added exactly once.

* Sampling: every rank holds a fixed shard of the records (record i on rank i mod W) and draws each of them
  independently with probability q = B / N from its own stream (seeded by the run seed AND the rank), every
  logical step, empty local batches included. The union over ranks is therefore one Poisson sample of the whole
  dataset at rate q, exactly what a single process draws and what the accountants assume. (Opacus'
  ``DistributedUniformWithReplacementSampler`` is not used: it skips a rank's empty local batch, so the ranks'
  steps fall out of step, and with one seed on every rank their inclusion draws would be correlated.)
* Mechanism: Opacus' ``DistributedDPOptimizer`` on a ``DPDDP`` model: every rank clips its own records, rank 0
  alone adds N(0, sigma^2 C^2), the sum over ranks is all-reduced and divided by B. The update, the card and the
  accounting are those of one process with the same config; white-box canaries are injected on rank 0 only.
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import DataLoader, Sampler, Subset, default_collate

from dpaudit.errors import DpauditError
from dpaudit.tokens import model_device


def world() -> tuple[int, int]:
    """(rank, world size): (0, 1) outside torchrun."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def is_main() -> bool:
    return world()[0] == 0


def init_from_env() -> None:
    """Join the process group torchrun describes (WORLD_SIZE > 1): NCCL when each rank has a GPU, else gloo."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.distributed.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from datetime import timedelta

    # rank 0 evaluates each variant while the others wait at the next variant's first broadcast
    torch.distributed.init_process_group(backend=backend, timeout=timedelta(hours=6))
    import atexit

    atexit.register(_leave)


def _leave() -> None:
    """Leave the process group before the interpreter tears down: a gloo group left to its destructor while
    the other rank exits can abort the process (SIGABRT) after every result was written."""
    try:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    except Exception:  # noqa: BLE001 - exiting anyway; a failed goodbye must not turn a success into a crash
        pass


def check_variants(variants) -> None:
    """Under torchrun: the variants the data-parallel path supports (private record-level DP-Adam or LMO-DP with
    per-sample gradients by hooks) or the sharded one (trainers/fsdp.py), else one line before any work; in one
    process, ghost_fsdp is refused (it needs ranks)."""
    if world()[1] <= 1:
        for v in variants:
            if v.trainer.engine.grad_sample_mode == "ghost_fsdp":
                raise DpauditError(f"variant {v.name!r}: grad_sample_mode = 'ghost_fsdp' shards the model over torchrun "
                                   "ranks; run under torchrun --nproc_per_node N (N >= 2), or use 'ghost' in one process")
        return
    for v in variants:
        t = v.trainer
        if t.engine.grad_sample_mode == "ghost_fsdp":
            check_fsdp_variant(v.name, t)
            continue
        if t.user_level or t.method not in ("dp_adam", "lmo_dp") or not t.engine.private:
            raise DpauditError(f"variant {v.name!r}: only private record-level dp_adam and lmo_dp variants train "
                               "under torchrun; run the others in one process (--variant NAME)")
        if t.engine.grad_sample_mode != "hooks":
            raise DpauditError(f"variant {v.name!r}: grad_sample_mode = {t.engine.grad_sample_mode!r} is not supported "
                               "under torchrun; "
                               "use 'hooks' (data parallel) or 'ghost_fsdp' (the model sharded over the ranks)")


def check_fsdp_variant(name: str, t) -> None:
    """One line before any work for a variant ghost_fsdp (trainers/fsdp.py) cannot train (``t``: its TrainerConfig);
    here, not in fsdp.py, which imports this module (no import circle)."""
    why = None
    if t.method != "dp_adam" or t.user_level or not t.engine.private:
        why = "only private record-level dp_adam variants train sharded"
    elif t.trainable != "full":
        why = f"trainable = {t.trainable!r} is not supported sharded (LoRA and head-only models fit one device: use " \
              "'ghost' or 'hooks' in one process or data-parallel with 'hooks')"
    elif t.engine.gradient_canaries and t.engine.gradient_canary_coordinates != "block":
        why = "white-box gradient canaries go on a block under FSDP (the model's coordinates are sharded); set " \
              "gradient_canary_coordinates = 'block'"
    if why:
        raise DpauditError(f"variant {name!r}, grad_sample_mode = 'ghost_fsdp': {why}")


def barrier() -> None:
    if world()[1] > 1:
        torch.distributed.barrier()


class ShardPoissonSampler(Sampler):
    """This rank's share of one Poisson batch per logical step: each record of the shard independently with
    probability ``sample_rate``; an empty local batch is yielded too (every rank takes every step). ``steps``
    batches per pass and ``generator`` as Opacus' samplers (trainers/data.Poisson streams it)."""

    def __init__(self, shard_size: int, sample_rate: float, steps: int, generator: torch.Generator):
        self.num_samples, self.sample_rate, self.steps, self.generator = shard_size, sample_rate, steps, generator

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        n = self.steps
        while n > 0:
            mask = torch.rand(self.num_samples, generator=self.generator) < self.sample_rate
            yield mask.nonzero(as_tuple=False).reshape(-1).tolist()
            n -= 1


def shard_loader(dataset, sample_rate: float, seed: int) -> DataLoader:
    """The Poisson loader of this rank's shard of ``dataset`` (a TensorDataset), its stream seeded by (seed, rank)."""
    rank, size = world()
    shard = Subset(dataset, list(range(rank, len(dataset), size)))
    if len(shard) == 0:
        raise DpauditError(f"rank {rank} of {size} has no records ({len(dataset)} in all); use fewer ranks")
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + 7919 * rank + 17)
    sampler = ShardPoissonSampler(len(shard), sample_rate, max(1, round(1 / sample_rate)), gen)
    empty = [t[:0] for t in dataset.tensors]  # an empty local batch: zero rows of every tensor

    def collate(batch):
        return default_collate(batch) if batch else empty

    return DataLoader(shard, batch_sampler=sampler, generator=gen, collate_fn=collate)


def record_level(model, optimizer, dataset, *, sigma: float, clipping_norm: float, expected_batch_size: int,
                 sample_rate: float, grad_sample_mode: str, seed: int, noise=None):
    """(per-sample-gradient module, distributed DP optimizer, None, this rank's Poisson loader).
    Over 8 parameters: the model, optimizer and data, then the mechanism's settings by keyword, as mechanism.record_level takes them."""
    from opacus import GradSampleModule
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from opacus.optimizers import DistributedDPOptimizer

    from dpaudit.trainers import mechanism
    from dpaudit.trainers import noise as noise_axis

    if grad_sample_mode != "hooks":
        raise DpauditError(f"train.grad_sample_mode = {grad_sample_mode!r} is not supported under torchrun yet; use "
                           "'hooks'")
    rank, size = world()
    device = model_device(model)
    module = GradSampleModule(DPDDP(model), batch_first=True, loss_reduction="mean")
    dp_opt = DistributedDPOptimizer(optimizer, noise_multiplier=sigma, max_grad_norm=clipping_norm,
                                    expected_batch_size=expected_batch_size / size, loss_reduction="mean",
                                    generator=mechanism.noise_generator(seed, device))
    noise_axis.install(dp_opt, noise, only_rank0=True)
    return module, dp_opt, None, shard_loader(dataset, sample_rate, seed)
