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
  fingerprinted when the probe attaches and compared at every step (on the same kind of coordinate sample) and
  in full when the record is saved; and the DP optimizer's own parameters, sampled after each step and compared
  before the next one's noise, so a second optimizer (or a hand-written update) stepping them shows too.
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
    def __init__(self, params: list, *, per_tensor: int = 1024, seed: int = 0):
        self.params = params
        self.index = [_sample_index(p.numel(), per_tensor, seed * 7907 + i, p.device) for i, p in enumerate(params)]
        self.n = np.array([int(ix.numel()) for ix in self.index], dtype=np.int64)
        self.ss_step, self.cross_step, self.n_step = [], [], []
        self.ss_tensor = np.zeros(len(params))
        self.steps_tensor = np.zeros(len(params), dtype=np.int64)
        self._before = None
        self._previous = None

    def before(self) -> None:
        """Just before the optimizer's ``add_noise``: the clipped sum at the sampled coordinates."""
        with torch.no_grad():
            self._before = [None if getattr(p, "summed_grad", None) is None else
                            p.summed_grad.reshape(-1)[ix].detach().to(torch.float64).clone()
                            for p, ix in zip(self.params, self.index)]

    def after(self) -> np.ndarray | None:
        """Just after ``add_noise``: this step's per-tensor sums of squares of the noise (None when unread)."""
        if self._before is None:
            return None
        parts, noise = [], []
        with torch.no_grad():
            for p, ix, b in zip(self.params, self.index, self._before):
                if b is None or p.grad is None:
                    parts.append(None)
                    noise.append(None)
                    continue
                d = p.grad.reshape(-1)[ix].to(torch.float64) - b
                noise.append(d)
                parts.append(d)
            have = [i for i, d in enumerate(parts) if d is not None]
            sq = torch.stack([parts[i].pow(2).sum() for i in have]) if have else torch.zeros(0)
            prev = self._previous
            cross = (sum(float((noise[i] * prev[i]).sum()) for i in have if prev is not None and prev[i] is not None
                             and prev[i].shape == noise[i].shape) if prev is not None else 0.0)
            sq = sq.cpu().numpy()
        self._before = None
        self._previous = noise
        ss = np.zeros(len(self.params))
        ss[have] = sq
        self.ss_tensor[have] += sq
        self.steps_tensor[have] += 1
        self.ss_step.append(float(sq.sum()))
        self.n_step.append(int(self.n[have].sum()))
        self.cross_step.append(float(cross))
        return ss

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


class Coverage:
    """Which parameters moved, and whether the DP optimizer moved them (see the module docstring)."""

    def __init__(self, model, dp_params: list, *, per_tensor: int = 256, seed: int = 0):
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
        self._o_index = [_sample_index(t.numel(), per_tensor, seed * 104729 + i, t.device)
                         for i, (_, t, _) in enumerate(self.outside)]
        self._o_values = [self._gather(t, ix) for (_, t, _), ix in zip(self.outside, self._o_index)]
        self._o_full = [_fingerprint(t) for _, t, _ in self.outside]
        self._d_index = [_sample_index(p.numel(), per_tensor, seed * 130363 + i, p.device)
                         for i, p in enumerate(dp_params)]
        self._d_values = None
        self.changed_outside = {}  # name -> first step at which it was seen changed
        self.changed_between = {}  # name -> first step before whose noise it had moved since the last DP step

    @staticmethod
    def _gather(t, ix):
        with torch.no_grad():
            return t.detach().reshape(-1)[ix].clone()

    def before_noise(self, step: int) -> list[str]:
        """Before a DP step's noise: the DP optimizer's parameters unchanged since its last step? Returns the names
        newly seen changed."""
        new = []
        if self._d_values is not None:
            for p, ix, v in zip(self.dp_params, self._d_index, self._d_values):
                if not torch.equal(self._gather(p, ix), v):
                    name = self.names.get(id(p), "a parameter of the DP optimizer")
                    if name not in self.changed_between:
                        self.changed_between[name] = step
                        new.append(name)
        return new

    def after_step(self, step: int) -> list[str]:
        """After a DP step: remember its parameters; the outside ones unchanged since the probe attached?"""
        self._d_values = [self._gather(p, ix) for p, ix in zip(self.dp_params, self._d_index)]
        new = []
        for (name, t, _), ix, v in zip(self.outside, self._o_index, self._o_values):
            if name not in self.changed_outside and not torch.equal(self._gather(t, ix), v):
                self.changed_outside[name] = step
                new.append(name)
        return new

    def final(self, step: int) -> None:
        """In full, once (when the record is written): every outside tensor's sum and sum of squares."""
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
