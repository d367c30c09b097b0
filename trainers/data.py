"""The data seam of the engine: padded tensors, how logical batches are drawn, and how they are split into
physical batches.

* records -> :func:`collate` -> fixed-length (input_ids, attention_mask, targets) tensors;
* record-level batches: shuffled fixed-size batches (non-private, :class:`Shuffled`) or Poisson sampling at
  q = B / N through Opacus' DPDataLoader (private; made by :mod:`.mechanism`, streamed by :class:`Poisson`),
  split by Opacus' BatchMemoryManager when a physical cap is set (noise still once per logical batch); both
  streams can resume mid-pass (trainers/snapshot.py);
* records at rates of their own (``rated``, :mod:`dpaudit.canaries.sampling`, shared with loops written elsewhere):
  canaries Poisson-sampled at their own rate beside the data's q;
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


class Poisson:
    """Endless batches of Opacus' Poisson loader (its logical batches split into physical parts by
    BatchMemoryManager when ``cap`` is set: the optimizer then skips the step, and the noise, until the last part)
    that can resume mid-pass. Where the stream is: the sampler generator's state at the start of the current pass
    (before the loader's own per-pass draw) and the logical batches taken from that pass. Resuming replays the
    pass start, draws the taken batches' masks again through the sampler itself, and shortens that one pass by as
    many, so every later draw falls where it fell in the uninterrupted run."""

    def __init__(self, loader, optimizer=None, cap: int | None = None):
        self.loader, self.optimizer, self.cap = loader, optimizer, cap
        self.sampler = loader.batch_sampler  # opacus UniformWithReplacementSampler (one mask draw per batch)
        self.gen = self.sampler.generator  # None (an unseeded loader): streams, but cannot resume
        self.pass_start, self.taken, self._skip = None, 0, 0

    def restore(self, pass_start: torch.Tensor, taken: int) -> None:
        self.gen.set_state(pass_start)
        self._skip = int(taken)

    def _loader(self):
        if self.optimizer is not None and self.cap:
            from opacus.utils.batch_memory_manager import BatchMemoryManager

            return BatchMemoryManager(data_loader=self.loader, max_physical_batch_size=self.cap,
                                      optimizer=self.optimizer).__enter__()
        return self.loader

    def __iter__(self) -> Iterator:
        full = self.sampler.steps
        while True:
            self.pass_start, self.taken = (self.gen.get_state() if self.gen is not None else None), 0
            skip, self._skip = self._skip, 0
            it = iter(self._loader())  # the loader's per-pass draw happens here
            for _ in range(skip):  # the masks of the batches taken before the snapshot, drawn again
                next(iter(self.sampler))
            self.taken = skip
            self.sampler.steps = full - skip  # read when the pass's first batch is drawn
            try:
                first = True
                for b in it:
                    if first:
                        self.sampler.steps, first = full, False
                    if self._last_part():
                        self.taken += 1
                    yield b
            finally:
                self.sampler.steps = full

    def _last_part(self) -> bool:
        """Whether the batch just drawn ends a logical batch (always, without physical splitting)."""
        if not (self.optimizer is not None and self.cap):
            return True
        queue = getattr(self.optimizer, "_step_skip_queue", None)
        return not (queue and queue[-1])


class Shuffled:
    """Endless batches of a shuffled loader (the non-private baseline) that can resume mid-pass: where the
    stream is = the generator's state at the start of the current pass and the batches taken from that pass."""

    def __init__(self, loader: DataLoader):
        self.loader, self.gen = loader, loader.generator
        self.pass_start, self.taken, self._skip = None, 0, 0

    def restore(self, pass_start: torch.Tensor, taken: int) -> None:
        self.gen.set_state(pass_start)
        self._skip = int(taken)

    def __iter__(self) -> Iterator:
        while True:
            self.pass_start, self.taken = self.gen.get_state(), 0
            for b in self.loader:
                self.taken += 1
                if self._skip:
                    self._skip -= 1
                    continue
                yield b


def parts(tensors, cap: int | None):
    """Consecutive slices of at most ``cap`` rows (all of it when cap is None or larger)."""
    n = tensors[0].size(0)
    if not cap or n <= cap:
        return [tensors]
    return [[t[k:k + cap] for t in tensors] for k in range(0, n, cap)]


class UserBatches:
    """Per-user tensors and the user sampler: each step draws every user independently with probability q
    (Poisson sampling of users, which is what the accountants assume).

    ``per_step = k`` (Chua et al., Alg. 2): what a sampled user contributes is drawn anew at every step from
    everything the user has, from its own seeded stream ``pick``: k of its records uniformly without replacement
    (all of them when it has at most k), or, with ``streams`` (a user's records' tokens concatenated, the paper's
    Random Chunk), k windows of ``max_len`` tokens at uniform offsets, which may cross record boundaries. Without
    ``per_step`` every user contributes the records it was given, at every step."""

    def __init__(self, records_by_user: dict[str, list[dict]], pad_id: int, max_len: int, q: float, seed: int,
                 per_step: int | None = None, streams: dict[str, list[int]] | None = None):
        self.users = sorted(records_by_user)
        self.pad_id, self.max_len, self.per_step, self.streams = pad_id, max_len, per_step, streams
        self.pool = records_by_user
        self.data = ({u: collate(records_by_user[u], pad_id, max_len).tensors for u in self.users}
                     if per_step is None else {})
        self.q = q
        self.rng = np.random.default_rng([seed, 5150])
        self.pick = np.random.default_rng([seed, 6170])  # per-step record draws (a stream of its own)

    def draw(self, user: str) -> list[dict]:
        """The records ``user`` contributes at this step (per_step mode)."""
        k = self.per_step
        if self.streams is not None:
            s, L = self.streams[user], self.max_len
            if len(s) <= L:
                starts = [0]
            else:
                starts = sorted(int(a) for a in self.pick.integers(0, len(s) - L + 1, size=k))
            return [{"input_ids": s[a:a + L], "targets": [-100] + s[a + 1:a + L]} for a in starts]
        recs = self.pool[user]
        if len(recs) <= k:
            return list(recs)
        return [recs[i] for i in sorted(self.pick.choice(len(recs), k, replace=False))]

    def _tensors(self, sampled: list[str]) -> dict[str, tuple]:
        if self.per_step is None:
            return self.data
        return {u: collate(self.draw(u), self.pad_id, self.max_len).tensors for u in sampled}

    def __iter__(self) -> Iterator[list[str]]:
        U = len(self.users)
        while True:
            yield [self.users[i] for i in np.flatnonzero(self.rng.random(U) < self.q)]

    def gather(self, sampled: list[str], mean_over_users: bool):
        """(ids, mask, targets, owner index, weight) of the sampled users' records; a record's weight is
        1 / (its owner's records), divided by the number of sampled users when ``mean_over_users``."""
        S = len(sampled) if mean_over_users else 1
        data = self._tensors(sampled)
        ids = torch.cat([data[u][0] for u in sampled])
        mask = torch.cat([data[u][1] for u in sampled])
        tgt = torch.cat([data[u][2] for u in sampled])
        owner = torch.cat([torch.full((data[u][0].size(0),), j) for j, u in enumerate(sampled)])
        w = torch.cat([torch.full((data[u][0].size(0),), 1.0 / (data[u][0].size(0) * S)) for u in sampled])
        return ids, mask, tgt, owner, w
