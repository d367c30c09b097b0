"""The probe under FSDP (Opacus' ``FSDPOptimizerFastGradientClipping``, dpaudit's ``ghost_fsdp``): what differs
from one process, in one place (docs/probe.md "Where it runs").

Under FSDP2 every rank holds a shard of each parameter, its gradient and its clipped sum (the optimizer keeps
the sums in ``grad_state[p]["summed_grad"]``); the reduce-scatter *averages* the ranks' clipped sums, and the
optimizer adds N(0, sigma^2 C^2) / W to each rank's own shard before dividing by the local expected batch B / W.
So, on the W ranks:

* the canary block (a plain tensor, on every rank, outside the sharded model) carries the canaries on rank 0 at
  1 / W of C u_i, as a record's clipped gradient enters the averaged sum, and its noise is rank 0's sigma C / W:
  its projections, times the global divisor B, read exactly as in one process;
* the noise meter runs on every rank over the shard it holds, and its per-tensor sums of squares are summed over
  the ranks every step (the block counted once, from rank 0), in units of C / W;
* the clipped-sum bound is checked on the whole sum: the shards' squared norms and the records are summed over
  the ranks, and the averaged sum is scaled back by W;
* records are counted from the per-sample norms the ghost-clipping module keeps on its layers (``model=`` is
  needed), leaving out the zero-norm placeholder a rank with an empty local batch runs (dpaudit's
  ``trainers/fsdp.placeholder``: a record with no target tokens, whose gradient is exactly zero).

Coverage is not read under FSDP (the parameters outside the optimizer are sharded too).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.probe.meters import norms


def is_fsdp(optimizer) -> bool:
    return any(c.__name__ == "FSDPOptimizerFastGradientClipping" for c in type(optimizer).__mro__)


def local(t):
    """The part of ``t`` this rank holds (a DTensor's local shard; a plain tensor itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


def summed(optimizer, p):
    """Parameter p's clipped sum as the FSDP optimizer keeps it (None before the first accumulate)."""
    state = optimizer.grad_state.get(p)
    return None if state is None else state["summed_grad"]


def prepare_block(optimizer, block) -> None:
    """The block as the FSDP optimizer's own parameters: a slot for its clipped sum."""
    optimizer.grad_state[block] = {"summed_grad": None}


def check_model(model) -> None:
    if model is None or not hasattr(model, "get_norm_sample"):
        raise DpauditError("under FSDP the probe counts each step's records from the ghost-clipping module's "
                           "per-sample norms: pass model= the module make_private (or dpaudit's "
                           "trainers.fsdp.record_level) returned, Opacus' GradSampleModuleFastGradientClippingFSDP")


def rows(model) -> int:
    """Records of this rank's last backward: its per-sample gradient norms that are > 0 (the placeholder record
    of an empty local batch has norm exactly 0)."""
    ns = getattr(model, "per_sample_gradient_norms", None)
    return 0 if ns is None else int((local(ns) > 0).sum())


def all_reduce_sum(values, device) -> np.ndarray:
    t = torch.tensor(np.asarray(values, dtype=np.float64), dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t)
    return t.cpu().numpy()


class Reducer:
    """The meter's ``reduce``: per-tensor values summed over the ranks, the block's from rank 0 only. Values in
    ``extra`` (the clipped sum's squared norm and the records of this rank, set before the noise) ride along in
    the same all-reduce and are left summed in ``reduced``: one collective per step for the probe."""

    def __init__(self, device, block_index: int | None, rank: int):
        self.device, self.block_index, self.rank = device, block_index, rank
        self.extra, self.reduced = [], None

    def __call__(self, vec: np.ndarray) -> np.ndarray:
        v = np.array(vec, dtype=np.float64)
        if self.block_index is not None and self.rank != 0:
            v[self.block_index] = 0.0
        n = v.size
        out = all_reduce_sum(np.r_[v, np.asarray(self.extra, dtype=np.float64)], self.device)
        self.reduced, self.extra = out[n:], []
        return out[:n]


def local_sum(optimizer, params, rows_here: int) -> list[float]:
    """[squared norm of this rank's shards of the clipped sum, this rank's records] (no collective)."""
    ts = [local(s) for s in (summed(optimizer, p) for p in params) if s is not None]
    with torch.no_grad():
        sq = float(norms(ts).pow(2).sum()) if ts else 0.0
    return [sq, float(rows_here)]


def ratio(sq: float, b: float, clipping_norm: float, world: int) -> float:
    """||sum of every rank's clipped gradients|| / (b C) from the summed squared shard norms and records."""
    if b == 0:
        return 0.0 if sq == 0 else float("inf")
    return math.sqrt(sq) * world / (b * clipping_norm)  # the reduce-scatter averaged the ranks' sums
