"""The privacy-unit axis of the engine: how one logical batch becomes per-unit gradients.

* :class:`RecordStep` — a batch of records; Opacus' hooks or ghost clipping give one gradient per record.
  An empty Poisson batch still reaches the optimizer (zero per-sample gradients), so its noisy step
  happens. Non-private batches above the physical cap are split and accumulated here (private ones are
  split by Opacus' BatchMemoryManager, :mod:`.data`).
* :class:`UserStep` — a list of sampled users; a user's gradient is the mean of its records' gradients.
  Private: Opacus' per-record gradients (loss_reduction="sum", each record weighted 1 / its owner's
  records) are summed by owner into ``p.grad_sample``, one row per user, for :class:`.mechanism.
  UserDPOptimizer` to clip. Non-private: plain autograd of the mean over users of their mean loss.

A step returns (summed loss, units) so the loop can report one mean loss per logical step.
"""

from __future__ import annotations

import torch

from dpaudit import opacus_private as op
from dpaudit.device import bf16_autocast
from dpaudit.tokens import model_device
from dpaudit.trainers.data import UserBatches, parts
from dpaudit.trainers.loss import batch_loss, forward, per_sample_loss, trim


class RecordStep:
    def __init__(self, model, criterion=None, choices: torch.Tensor | None = None, split_cap: int | None = None,
                 placeholder: list[torch.Tensor] | None = None, autocast: str = "off"):
        self.model, self.criterion, self.choices, self.split_cap = model, criterion, choices, split_cap
        self.placeholder = placeholder  # sharded training: a zero-loss record an empty local batch runs (FSDP)
        self.device = model_device(model)
        # "bf16": a non-private run's forward under bf16 autocast where the device computes it natively (a CPU
        # with AVX512-BF16 or AMX, a CUDA GPU); float32 on a CPU without (dpaudit.device.bf16_autocast, noted)
        self.autocast, self.precision_note = bf16_autocast(self.device, autocast)

    def __call__(self, batch) -> tuple[float, int]:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast == "bf16"):
            return self._step(batch)

    def _step(self, batch) -> tuple[float, int]:
        n = batch[0].size(0)
        if n == 0 and self.placeholder is not None:  # every rank joins FSDP's collectives; zero loss and gradient
            loss = batch_loss(self.model, *(t.to(self.device) for t in self.placeholder), self.criterion, self.choices)
            loss.backward()
            return 0.0, 0
        if n == 0:  # Poisson may draw an empty batch: the noisy step still happens
            for p in self.model.parameters():
                if p.requires_grad:
                    p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
            return 0.0, 0
        pieces = parts(batch, self.split_cap)
        if len(pieces) == 1:
            loss = batch_loss(self.model, *(t.to(self.device) for t in batch), self.criterion, self.choices)
            loss.backward()
            return float(loss.detach()) * n, n
        total = 0.0  # non-private gradient accumulation: the mean over the logical batch, one optimizer step
        for part in pieces:
            part = [t.to(self.device) for t in part]
            loss = batch_loss(self.model, *part, self.criterion, self.choices) * part[0].size(0) / n
            loss.backward()
            total += float(loss.detach())
        return total * n, n


class UserStep:
    def __init__(self, model, users: UserBatches, params: list, private: bool, chunk: int = 64):
        self.model, self.users, self.params, self.private, self.chunk = model, users, params, private, chunk
        self.device = model_device(model)

    def __call__(self, sampled: list[str]) -> tuple[float, int]:
        if self.private and hasattr(self.model, "clipped_backward"):  # book-keeping: users clipped in one backward
            return user_bk_step(self.model, self.params, self.users, sampled, self.chunk), 1 if sampled else 0
        if self.private:
            grads, loss = user_gradients(self.model, self.params, self.users, sampled, self.chunk)
            for p, G in zip(self.params, grads):
                p.grad_sample = G
            return loss, 1 if sampled else 0
        if not sampled:
            return 0.0, 0
        return users_mean_loss_backward(self.model, self.users, sampled, self.chunk), 1


def _chunks(users: UserBatches, sampled: list[str], chunk: int, mean_over_users: bool, device):
    ids, mask, tgt, owner, weight = users.gather(sampled, mean_over_users)
    for s in range(0, ids.size(0), chunk):
        sl = slice(s, s + chunk)
        part = [t.to(device) for t in trim(ids[sl], mask[sl], tgt[sl])]
        yield part, owner[sl].to(device), weight[sl].to(device)


def user_gradients(gsm, params: list, users: UserBatches, sampled: list[str], chunk: int = 64):
    """Per-user gradients (mean over each user's records), shape (n_users, *p.shape) per parameter, from
    Opacus per-record gradients summed by owner; and the mean of the users' mean losses."""
    user_grads = [torch.zeros((len(sampled), *p.shape), device=p.device) for p in params]
    if not sampled:
        return user_grads, 0.0
    total = 0.0
    for (ids, mask, tgt), owner, weight in _chunks(users, sampled, chunk, False, model_device(gsm)):
        loss = (per_sample_loss(forward(gsm, ids, mask), tgt) * weight).sum()
        loss.backward()  # record r's grad_sample = w_r * its gradient (loss_reduction="sum")
        total += float(loss.detach())
        for G, p in zip(user_grads, params):
            G.index_add_(0, owner, p.grad_sample)
            p.grad_sample = None
        for p in params:
            p.grad = None
    return user_grads, total / len(sampled)


def user_bk_step(bk, params: list, users: UserBatches, sampled: list[str], chunk: int = 64) -> float:
    """Book-keeping user-level step (trainers/bk_clipping.py): whole users per pass (about ``chunk`` records),
    each user's gradient — the weighted sum of its records' — clipped from one backward, never formed per record;
    p.grad holds the sum over users of the clipped user gradients (Opacus' ghost optimizer adds the noise). Returns
    the mean of the users' mean losses."""
    if not sampled:
        for p in params:
            p.grad = torch.zeros_like(p)
            op.set_norm_sample(p, torch.zeros(0, device=p.device))
        return 0.0
    ids, mask, tgt, owner, weight = users.gather(sampled, False)  # one draw per user, as the hooks path
    counts = torch.bincount(owner, minlength=len(sampled)).tolist()  # rows come user by user
    groups, u0, r0, rows = [], 0, 0, 0
    for u, k in enumerate(counts):
        if u > u0 and rows + k > chunk:
            groups.append((u0, u, r0, r0 + rows))
            u0, r0, rows = u, r0 + rows, 0
        rows += k
    groups.append((u0, len(counts), r0, r0 + rows))
    total = 0.0
    device = model_device(bk)
    for j, (u0, u1, r0, r1) in enumerate(groups):  # passes after the first add to the step's sums and norms
        i, m, t = (x.to(device) for x in trim(ids[r0:r1], mask[r0:r1], tgt[r0:r1]))
        loss = per_sample_loss(forward(bk, i, m), t) * weight[r0:r1].to(device)
        bk.clipped_backward(loss, (owner[r0:r1] - u0).to(device), u1 - u0, accumulate=j > 0)
        total += float(loss.detach().sum())
    return total / len(sampled)


def users_mean_loss_backward(model, users: UserBatches, sampled: list[str], chunk: int = 64) -> float:
    """Non-private: backward of the mean over sampled users of each user's mean record loss (the same
    gradient as averaging the unclipped user gradients), with plain autograd; returns that loss."""
    total = 0.0
    for (ids, mask, tgt), _, weight in _chunks(users, sampled, chunk, True, model_device(model)):
        loss = (per_sample_loss(forward(model, ids, mask), tgt) * weight).sum()
        loss.backward()
        total += float(loss.detach())
    return total
