"""The data seam of the engine: padded tensors, how logical batches are drawn, and how they are split into
physical batches.

* records -> :func:`collate` -> fixed-length (input_ids, attention_mask, targets) tensors;
* record-level batches: shuffled fixed-size batches (non-private) or Poisson sampling at q = B / N through
  Opacus' DPDataLoader (private; made by :mod:`.mechanism`), split by Opacus' BatchMemoryManager when a
  physical cap is set (noise still once per logical batch);
* user-level batches: :class:`UserBatches`, each user drawn independently at rate q = B / U per step.

Batches stay on the CPU here; the unit step moves each physical part to the model's device.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


def collate(records: list[dict], pad_id: int, max_len: int) -> TensorDataset:
    """Fixed-length padded tensors (input_ids, attention_mask, targets)."""
    n = len(records)
    ids = torch.full((n, max_len), pad_id, dtype=torch.long)
    mask = torch.zeros((n, max_len), dtype=torch.long)
    tgt = torch.full((n, max_len), -100, dtype=torch.long)
    for i, r in enumerate(records):
        k = min(len(r["input_ids"]), max_len)
        ids[i, :k] = torch.tensor(r["input_ids"][:k])
        mask[i, :k] = 1
        tgt[i, :k] = torch.tensor(r["targets"][:k])
    return TensorDataset(ids, mask, tgt)


def shuffled_loader(data: TensorDataset, batch: int, seed: int, drop_last: bool) -> DataLoader:
    """Shuffled batches of ``batch`` records (the non-private baseline; Opacus turns the private one into
    Poisson sampling of the same expected size)."""
    return DataLoader(data, batch_size=batch, shuffle=True, drop_last=drop_last,
                      generator=torch.Generator().manual_seed(seed))


def logical_batches(loader, optimizer=None, cap: int | None = None) -> Iterator:
    """Endless stream of physical batches. With a cap and a DP optimizer, Opacus' BatchMemoryManager splits
    each logical (Poisson) batch and makes the optimizer skip the step (and the noise) until its last part;
    without an optimizer the loader's batches come whole (the unit step splits non-private batches)."""
    while True:
        if optimizer is not None and cap:
            from opacus.utils.batch_memory_manager import BatchMemoryManager

            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=cap, optimizer=optimizer) as mem:
                yield from mem
        else:
            yield from loader


def parts(tensors, cap: int | None):
    """Consecutive slices of at most ``cap`` rows (all of it when cap is None or larger)."""
    n = tensors[0].size(0)
    if not cap or n <= cap:
        return [tensors]
    return [[t[k:k + cap] for t in tensors] for k in range(0, n, cap)]


class UserBatches:
    """Per-user tensors and the user sampler: each step draws every user independently with probability q
    (Poisson sampling of users, which is what the accountants assume)."""

    def __init__(self, records_by_user: dict[str, list[dict]], pad_id: int, max_len: int, q: float, seed: int):
        self.users = sorted(records_by_user)
        self.data = {u: collate(records_by_user[u], pad_id, max_len).tensors for u in self.users}
        self.q = q
        self._rng = np.random.default_rng([seed, 5150])

    def __iter__(self) -> Iterator[list[str]]:
        U = len(self.users)
        while True:
            yield [self.users[i] for i in np.flatnonzero(self._rng.random(U) < self.q)]

    def gather(self, sampled: list[str], mean_over_users: bool):
        """(ids, mask, targets, owner index, weight) of the sampled users' records; a record's weight is
        1 / (its owner's records), divided by the number of sampled users when ``mean_over_users``."""
        S = len(sampled) if mean_over_users else 1
        ids = torch.cat([self.data[u][0] for u in sampled])
        mask = torch.cat([self.data[u][1] for u in sampled])
        tgt = torch.cat([self.data[u][2] for u in sampled])
        owner = torch.cat([torch.full((self.data[u][0].size(0),), j) for j, u in enumerate(sampled)])
        w = torch.cat([torch.full((self.data[u][0].size(0),), 1.0 / (self.data[u][0].size(0) * S)) for u in sampled])
        return ids, mask, tgt, owner, w
