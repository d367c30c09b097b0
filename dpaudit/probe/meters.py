"""What the probe reads off the optimizer besides its canaries (docs/probe.md): every tensor's noise, and which
parameters moved.

* :class:`NoiseMeter` reads the noise the optimizer actually added to each parameter tensor, on a fixed random
  set of at most ``per_tensor`` coordinates of it (all of a small tensor's): the clipped sum at those coordinates
  just before ``add_noise`` and the gradient just after, whose difference is the noise (the canaries, when on the
  model, are already in the sum). Kept per step: the sum of squares over all tensors and its coordinate count
  (the per-step noise, so a schedule the card does not state shows), per tensor pooled over steps (so noise
  left out of one tensor shows), and the inner product of consecutive steps' noise (so a reused draw shows).
  A gather of a few thousand values per tensor and step; no copy of a gradient.
* :class:`Coverage` (when the probe is given the model): the parameters and buffers outside the DP optimizer,
  fingerprinted when the probe attaches and compared at every step (each tensor's norm, one fused call) and in
  full (float64 sum and sum of squares) when the record is saved; and the DP optimizer's own parameters, their
  norms taken after each step and compared before the next one's noise, so a second optimizer (or a hand-written
  update) stepping them shows too.
"""

from __future__ import annotations

import numpy as np
import torch


def _sample_index(numel: int, k: int, seed: int, device) -> torch.Tensor:
    if numel <= k:
        return torch.arange(numel, device=device)
    rng = np.random.default_rng(seed)
    return torch.as_tensor(np.sort(rng.choice(numel, size=k, replace=False)), device=device)


class NoiseMeter:
    """``local(p)``: the part of parameter p this process holds (its shard under FSDP); ``read(p, attr)``: that
    part of its ``summed_grad`` or ``grad`` (None when it has none); ``reduce(vector)``: a vector of per-tensor
    values (and the cross term) summed over the processes that each meter their own shard."""

    def __init__(self, params: list, *, per_tensor: int = 1024, seed: int = 0, local=None, read=None, reduce=None):
        self.params = params
        self.local = local or (lambda p: p)
        self.read = read or (lambda p, attr: getattr(p, attr, None))
        self.reduce = reduce
        held = [self.local(p) for p in params]
        self.index = [_sample_index(t.numel(), per_tensor, seed * 7907 + i, t.device) for i, t in enumerate(held)]
        self.n_local = np.array([int(ix.numel()) for ix in self.index], dtype=np.int64)  # this process's
        # a tensor read whole (at most per_tensor coordinates): its flat view, no gather (the same values, in order)
        self.whole = [int(ix.numel()) == t.numel() for ix, t in zip(self.index, held)]
        self.n = self.n_local
        if reduce is not None:  # coordinates read over all the shards
            self.n = np.rint(reduce(np.r_[self.n.astype(np.float64), 0.0])[:-1]).astype(np.int64)
        self.ss_step, self.cross_step, self.n_step = [], [], []
        self.ss_tensor = np.zeros(len(params))
        self.steps_tensor = np.zeros(len(params), dtype=np.int64)
        self._before = None
        self._previous = None  # (last step's noise at the sampled coordinates, which tensors)
        self._seg = {}

    def _gather(self, attr: str) -> tuple[torch.Tensor, np.ndarray]:
        """(the sampled coordinates of every tensor's ``attr``, in one float64 vector; which tensors had it)."""
        parts, have = [], []
        for i, (p, ix, whole) in enumerate(zip(self.params, self.index, self.whole)):
            t = self.read(p, attr)  # the callers hold no_grad: nothing here is recorded for autograd
            if t is not None:
                flat = t.reshape(-1)
                parts.append(flat if whole and flat.numel() == ix.numel() else torch.index_select(flat, 0, ix))
                have.append(i)
        dev = self.index[0].device
        if not parts:
            return torch.zeros(0, dtype=torch.float64, device=dev), np.zeros(0, dtype=np.int64)
        if len({(x.device, x.dtype) for x in parts}) > 1:
            parts = [x.to(dev, torch.float64) for x in parts]
        return torch.cat(parts).to(torch.float64), np.asarray(have, dtype=np.int64)

    def before(self, scale: float = 1.0) -> None:
        """Just before the optimizer's ``add_noise``: the clipped sum at the sampled coordinates (times ``scale``:
        1 / B when the reading after is the update, not the noisy sum)."""
        with torch.no_grad():
            self._before = self._gather("summed_grad")
            if scale != 1.0:
                self._before = (self._before[0] * scale, self._before[1])

    def after(self) -> np.ndarray | None:
        """Just after ``add_noise``: this step's per-tensor sums of squares of the noise (None when unread). One
        device-to-host copy per step."""
        if self._before is None:
            return None
        (b, have_b), self._before = self._before, None
        with torch.no_grad():
            g, have_g = self._gather("grad")
            if not np.array_equal(have_b, have_g):  # a tensor without a clipped sum or without a gradient
                keep = np.intersect1d(have_b, have_g)
                b, g = self._select(b, have_b, keep), self._select(g, have_g, keep)
                have_b = keep
            d = g - b
            key = have_b.tobytes()
            seg = self._seg.get(key)
            if seg is None:  # which tensor each read coordinate belongs to (cached: the same every step)
                seg = self._seg[key] = torch.as_tensor(np.repeat(np.arange(have_b.size), self.n_local[have_b]),
                                                       device=d.device)
            sq = torch.zeros(have_b.size, dtype=torch.float64, device=d.device).index_add_(0, seg, d * d)
            prev = self._previous
            same = prev is not None and np.array_equal(prev[1], have_b)
            # an elementwise product summed, not a BLAS dot: whose rounding depends on the vectors' alignment in
            # memory, so a run resumed from a snapshot (the previous noise restored elsewhere) read other last bits
            cross = (d * prev[0]).sum().reshape(1) if same else torch.zeros(1, dtype=torch.float64, device=d.device)
            host = torch.cat([sq, cross]).cpu().numpy()
        self._previous = (d, have_b)
        if self.reduce is not None:  # every shard's noise: the per-tensor sums and the cross term over the processes
            full = np.zeros(len(self.params) + 1)
            full[have_b], full[-1] = host[:-1], host[-1]
            full = self.reduce(full)
            host = np.r_[full[have_b], full[-1]]
        sq, cross = host[:-1], float(host[-1])
        ss = np.zeros(len(self.params))
        ss[have_b] = sq
        self.ss_tensor[have_b] += sq
        self.steps_tensor[have_b] += 1
        self.ss_step.append(float(sq.sum()))
        self.n_step.append(int(self.n[have_b].sum()))
        self.cross_step.append(cross)
        return ss

    def _select(self, flat: torch.Tensor, have: np.ndarray, keep: np.ndarray) -> torch.Tensor:
        offsets = np.r_[0, np.cumsum(self.n_local[have])]
        pos = {int(t): k for k, t in enumerate(have)}
        return torch.cat([flat[offsets[pos[int(t)]]:offsets[pos[int(t)] + 1]] for t in keep]) if keep.size else flat[:0]

    def arrays(self, scale: float) -> dict:
        """The record's arrays, in units of ``scale`` (C: the noise's standard deviation is then sigma)."""
        s2 = scale * scale
        return {"noise_ss_step": np.asarray(self.ss_step, dtype=np.float64) / s2,
                "noise_n_step": np.asarray(self.n_step, dtype=np.int64),
                "noise_cross_step": np.asarray(self.cross_step, dtype=np.float64) / s2,
                "noise_ss_tensor": self.ss_tensor / s2,
                "noise_n_tensor": self.n * self.steps_tensor}

    def snapshot(self) -> dict:
        return {"ss_step": list(self.ss_step), "cross_step": list(self.cross_step), "n_step": list(self.n_step),
                "ss_tensor": self.ss_tensor.tolist(), "steps_tensor": self.steps_tensor.tolist()}

    def restore(self, state: dict) -> None:
        self.ss_step, self.cross_step = list(state["ss_step"]), list(state["cross_step"])
        self.n_step = list(state["n_step"])
        self.ss_tensor = np.asarray(state["ss_tensor"], dtype=np.float64)
        self.steps_tensor = np.asarray(state["steps_tensor"], dtype=np.int64)
        self._previous = None


def _fingerprint(t: torch.Tensor) -> tuple[float, float]:
    """Sum and sum of squares, in float64 (an update that moves any coordinate changes them almost surely)."""
    with torch.no_grad():
        x = t.detach().to(torch.float64)
        return float(x.sum()), float(x.pow(2).sum())


def norms(tensors) -> torch.Tensor:
    """Every tensor's norm, in one fused call where torch offers it: an update that moves a tensor changes its
    norm almost surely (the full float64 fingerprints at the end make sure)."""
    with torch.no_grad():
        ts = [t if t.is_floating_point() else t.to(torch.float64) for t in tensors]
        if not ts:
            return torch.zeros(0)
        foreach = getattr(torch, "_foreach_norm", None)
        groups = {}
        for i, t in enumerate(ts):
            groups.setdefault((t.device, t.dtype), []).append(i)
        dev = ts[0].device
        if foreach is not None and len(groups) == 1:  # the usual case: one fused call, one stack
            return torch.stack(foreach(ts)).to(torch.float64)
        out = [None] * len(ts)
        for idx in groups.values():
            got = foreach([ts[i] for i in idx]) if foreach is not None else [torch.linalg.vector_norm(ts[i])
                                                                              for i in idx]
            for i, n in zip(idx, got):
                out[i] = n
        return torch.stack([n.to(dev, torch.float64) for n in out])


class Coverage:
    """Which parameters moved, and whether the DP optimizer moved them (see the module docstring)."""

    def __init__(self, model, dp_params: list):
        dp = {id(p) for p in dp_params}
        seen = set()
        self.outside = []  # (name, tensor, kind): parameters not stepped by the DP optimizer, and buffers
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if id(p) not in dp:
                self.outside.append((name, p, "trainable parameter" if p.requires_grad else "frozen parameter"))
        for name, b in model.named_buffers():
            if id(b) not in seen and b.numel():
                seen.add(id(b))
                self.outside.append((name, b, "buffer"))
        self.names = {id(p): n for n, p in model.named_parameters()}
        self.dp_params = dp_params
        self.dp_covered = sum(1 for p in dp_params if id(p) in self.names)
        self.trainable_outside = [n for n, _, k in self.outside if k == "trainable parameter"]
        self._o_full = [_fingerprint(t) for _, t, _ in self.outside]
        self._o_norms = norms([t for _, t, _ in self.outside])
        self._d_norms = None
        self.changed_outside = {}  # name -> first step at which it was seen changed
        self.changed_between = {}  # name -> first step before whose noise it had moved since the last DP step

    @property
    def armed(self) -> bool:
        """Whether :meth:`before_noise` compares anything yet (after the first DP step)."""
        return self._d_norms is not None

    def before_noise(self, step: int, now: torch.Tensor | None = None) -> list[str]:
        """Before a DP step's noise: the DP optimizer's parameters unchanged since its last step? Returns the names
        newly seen changed. ``now``: their norms, when the caller computed them in a fused call of its own."""
        new = []
        if self._d_norms is None:
            return new
        now = norms(self.dp_params) if now is None else now
        if torch.equal(now, self._d_norms):
            return new
        for k in torch.nonzero(now != self._d_norms).flatten().tolist():
            name = self.names.get(id(self.dp_params[k]), "a parameter of the DP optimizer")
            if name not in self.changed_between:
                self.changed_between[name] = step
                new.append(name)
        return new

    def after_step(self, step: int) -> list[str]:
        """After a DP step: remember its parameters' norms; the outside tensors unchanged since the probe attached?"""
        both = norms(self.dp_params + [t for _, t, _ in self.outside])  # one fused call for both
        nd = len(self.dp_params)
        self._d_norms, now = both[:nd], both[nd:]
        new = []
        if not self.outside:
            return new
        if torch.equal(now, self._o_norms):
            return new
        for k in torch.nonzero(now != self._o_norms).flatten().tolist():
            name = self.outside[k][0]
            if name not in self.changed_outside:
                self.changed_outside[name] = step
                new.append(name)
        return new

    def final(self, step: int) -> None:
        """In full, once (when the record is written): every outside tensor's sum and sum of squares in float64."""
        for (name, t, _), fp in zip(self.outside, self._o_full):
            if name not in self.changed_outside and _fingerprint(t) != fp:
                self.changed_outside[name] = step

    def record(self) -> dict:
        kinds = {n: k for n, _, k in self.outside}
        return {"model_given": True, "dp_parameters": len(self.dp_params),
                "dp_parameters_of_the_model": self.dp_covered,
                "outside": len(self.outside),
                "trainable_outside": self.trainable_outside,
                "changed_outside": [{"name": n, "kind": kinds[n], "step": s} for n, s in self.changed_outside.items()],
                "changed_between_steps": [{"name": n, "step": s} for n, s in self.changed_between.items()]}
