"""Canaries sampled at a rate of their own (docs/canary_designs.md, "Canaries at their own rate"): Poisson sampling
with one rate per record, as a sampler and as Opacus' loader rebuilt around it. dpaudit's dp_adam uses it
(trainers/data.py), and so can a loop written elsewhere (:func:`dpaudit.api.sample_canaries_at_rate`);
:func:`dpaudit.claim.opacus_card.card_from_opacus` reads the rates back from the loader, so the card accounts
every record at the larger rate."""

from __future__ import annotations

import torch
from opacus.utils.uniform_sampler import UniformWithReplacementSampler
from torch.utils.data import DataLoader

from dpaudit.errors import DpauditError


class RatedSampler(UniformWithReplacementSampler):
    """Poisson sampling with a rate per record. ``sample_rate`` is the mean rate (what Opacus' BatchMemoryManager
    reads to size its physical batches); each step draws one uniform per record from ``generator``, as Opacus'
    sampler does, and keeps record i when it falls below ``rates[i]``. ``sampling``: what a card records of it
    ({records, canaries, canary_records}), set by :func:`at_their_rate`."""

    def __init__(self, rates: torch.Tensor, generator=None, steps: int | None = None):
        rates = rates.to(torch.float32)  # compared as Opacus compares: a float32 uniform with a float32 rate
        if not bool(((rates > 0) & (rates <= 1)).all()):
            raise ValueError("every record's rate must lie in (0, 1]")
        super().__init__(num_samples=int(rates.numel()), sample_rate=float(rates.mean()), generator=generator,
                         steps=steps)
        self.rates = rates
        self.sampling: dict | None = None

    def __iter__(self):
        for _ in range(self.steps):
            mask = torch.rand(self.num_samples, generator=self.generator) < self.rates
            yield mask.nonzero(as_tuple=False).reshape(-1).tolist()


def rated(dp_loader: DataLoader, rates: torch.Tensor) -> DataLoader:
    """Opacus' Poisson loader with record i sampled at ``rates[i]`` at every step (independently of every other
    record): the same dataset, empty-batch collation, generator and step count; the draw is Opacus' own (one
    uniform per record, compared with its rate), so equal rates give Opacus' batches exactly."""
    old = dp_loader.batch_sampler
    if rates.shape != (old.num_samples,):
        raise ValueError(f"one rate per record: {tuple(rates.shape)} rates for {old.num_samples} records")
    sampler = RatedSampler(rates, generator=old.generator, steps=old.steps)
    return DataLoader(dp_loader.dataset, batch_sampler=sampler, collate_fn=dp_loader.collate_fn,
                      generator=dp_loader.generator)


def at_their_rate(dp_loader: DataLoader, is_canary, rate: float) -> DataLoader:
    """``dp_loader`` (the Poisson loader Opacus' ``make_private`` returned) with the rows ``is_canary`` marks (one
    flag per row of its dataset) sampled at ``rate`` and the others at the loader's own rate."""
    sampler = getattr(dp_loader, "batch_sampler", None)
    if not isinstance(sampler, UniformWithReplacementSampler) or isinstance(sampler, RatedSampler):
        raise DpauditError("canaries at their own rate need the Poisson loader Opacus' make_private returned "
                           "(poisson_sampling=True, one process); pass that loader")
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        raise DpauditError(f"the canaries' sampling rate must lie in (0, 1], got {rate!r}")
    flags = torch.as_tensor([bool(x) for x in is_canary])
    if flags.numel() != sampler.num_samples:
        raise DpauditError(f"is_canary has {flags.numel()} flags for a dataset of {sampler.num_samples} rows: one per "
                           "row, in the dataset's order")
    q = float(sampler.sample_rate)
    loader = rated(dp_loader, torch.where(flags, torch.tensor(float(rate)), torch.tensor(q)))
    loader.batch_sampler.sampling = {"records": q, "canaries": float(rate), "canary_records": int(flags.sum())}
    return loader
