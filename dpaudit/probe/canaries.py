"""White-box gradient canaries (Nasr et al. 2023; Steinke, Nasr, Jagielski 2023), for any DP method.

m canaries, each a clipped "example" whose gradient is C times a fixed unit direction u_i: a Dirac
coordinate of the trainable parameters (``dirac``), a unit vector spread with random signs over 16
random coordinates (``sparse``), or over all of them (``dense``, :class:`DenseGradientCanaries`). A run may
plant several kinds (``dirac+dense``): each is its own set of m canaries, scored and audited separately. Each canary gets S_i = +1 (inserted) or -1 with probability 1/2, drawn
before training. An inserted canary joins each batch with the same Poisson probability q as a record,
and its gradient is added to the clipped sum *before* the noise, exactly as a real record's would be.

The auditor sees every noisy update g_t (the white-box threat model) and scores canary i by
sum_t <g_t, u_i> * B / C: about (times sampled) for inserted canaries, about 0 for held-out ones, plus
noise of standard deviation sigma per step. If the mechanism's noise matches its accounting, the
one-run bound on these scores cannot exceed the claim; if it does not, this audit is the one that
notices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.options import GRADIENT_CANARY_KINDS as KINDS

SPARSE_WIDTH = 16


@dataclass
class GradientCanaries:
    m: int
    kind: str
    seed: int
    clipping_norm: float
    sample_rate: float
    signs: np.ndarray = field(default=None)
    coords: list = field(default=None)  # per canary: (param index array, flat index array, value array)
    scores: np.ndarray = field(default=None)
    times_sampled: np.ndarray = field(default=None)
    online: dict | None = field(default=None)  # O(m) mode (:meth:`go_online`): no per-step projections kept

    @classmethod
    def plan(cls, m: int, kind: str, seed: int, params: list[torch.nn.Parameter], clipping_norm: float,
             sample_rate: float) -> GradientCanaries:
        if kind == "dense" and cls is GradientCanaries:
            return DenseGradientCanaries.plan(m, kind, seed, params, clipping_norm, sample_rate)
        if kind not in KINDS:
            raise DpauditError(f"gradient canary kind must be one of {KINDS}, got {kind!r}")
        if m < 2:
            raise DpauditError(f"gradient canaries need m >= 2, got {m}")
        sizes = np.array([p.numel() for p in params])
        total = int(sizes.sum())
        width = 1 if kind == "dirac" else SPARSE_WIDTH
        if m * width > total:
            raise DpauditError(f"{m} {kind} canaries need {m * width} distinct coordinates; the model has {total}")
        rng = np.random.default_rng([seed, 31337])
        signs = rng.choice([-1, 1], size=m)
        flat = rng.choice(total, size=m * width, replace=False)  # distinct coordinates for every canary
        offsets = np.cumsum(np.r_[0, sizes[:-1]])
        pidx = np.searchsorted(offsets, flat, side="right") - 1
        within = flat - offsets[pidx]
        vals = np.ones(m * width) if kind == "dirac" else rng.choice([-1.0, 1.0], m * width) / np.sqrt(width)
        coords = [(pidx[i * width:(i + 1) * width], within[i * width:(i + 1) * width], vals[i * width:(i + 1) * width])
                  for i in range(m)]
        return cls(m, kind, seed, clipping_norm, sample_rate, signs, coords, np.zeros(m), np.zeros(m, dtype=int))

    def _by_param(self):
        """Per parameter: (canary ids, flat indices, values), for vectorised injection and scoring."""
        out = {}
        for i, (pi, wi, vi) in enumerate(self.coords):
            for p_index, w, v in zip(pi, wi, vi):
                out.setdefault(int(p_index), ([], [], []))
                out[int(p_index)][0].append(i)
                out[int(p_index)][1].append(int(w))
                out[int(p_index)][2].append(float(v))
        return {k: (np.array(c), torch.tensor(w), torch.tensor(v, dtype=torch.float32)) for k, (c, w, v) in out.items()}

    def start(self, seed: int) -> None:
        """Fix the per-step sampling stream (independent of the data sampler)."""
        self._rng = np.random.default_rng([seed, self.seed, 99991])
        self._inserted = np.flatnonzero(self.signs > 0)
        self._index = self._by_param()
        # the canary of every (parameter, coordinate) entry, in the order score() reads them: one bincount per step
        self._order = np.concatenate([c for c, _, _ in self._index.values()]) if self._index else np.zeros(0, int)
        # the same entries flat, for inject: which parameter each belongs to, its coordinate and value there
        self._flat_k = np.concatenate([np.full(c.size, k) for k, (c, _, _) in self._index.items()]) if self._index \
            else np.zeros(0, int)
        self._flat_w = torch.cat([w for _, w, _ in self._index.values()]) if self._index else torch.zeros(0, dtype=int)
        self._flat_v = torch.cat([v for _, _, v in self._index.values()]) if self._index else torch.zeros(0)
        self._on_device = {}  # (parameter, device) -> its flat indices and values there (moved once, not per step)
        self._mask = np.zeros(self.m, dtype=bool)
        self.steps = []

    def _placed(self, k: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (k, device)
        got = self._on_device.get(key)
        if got is None:
            _, w, v = self._index[k]
            got = self._on_device[key] = (w.to(device), v.to(device))
        return got

    def _placed_all(self, device) -> torch.Tensor:
        """Every entry's value (``_flat_v``, in the order :meth:`score` reads the entries) on ``device``."""
        got = self._on_device.get(("all", device))
        if got is None:
            got = self._on_device[("all", device)] = self._flat_v.to(device)
        return got

    def go_online(self, noise_multiplier: float) -> None:
        """O(m) memory instead of O(T m): accumulate each canary's per-step likelihood ratio at (q, sigma) as the
        steps come (dpaudit/audit/whitebox_lr.py, the same formula on the same float32 projections), with the sums
        of squares the noise checks need, and keep no per-step projections."""
        if not noise_multiplier > 0:
            raise DpauditError(f"the online likelihood ratio needs noise (sigma > 0), got {noise_multiplier}")
        self.online = {"noise_multiplier": float(noise_multiplier), "llr": np.zeros(self.m), "sum_of_squares": 0.0,
                       "heldout_ss": [], "steps": 0}

    def _record(self, step: np.ndarray) -> None:
        """One applied update's projections <g_t, u_i> * B / C (all m canaries): summed into the score and kept
        per step (or, online, folded into the likelihood-ratio statistic, dpaudit/audit/whitebox_lr.py)."""
        self.scores += step
        x = step.astype(np.float32)
        if self.online is None:
            self.steps.append(x)
            return
        from dpaudit.audit.whitebox_lr import subsampled_gaussian_llr

        o, x = self.online, x.astype(np.float64)
        o["llr"] += subsampled_gaussian_llr(x[None, :], self.sample_rate, o["noise_multiplier"])
        o["sum_of_squares"] += float(np.sum(x * x))
        o["heldout_ss"].append(float(np.sum(x[self.signs < 0] ** 2)))
        o["steps"] += 1

    @property
    def n_steps(self) -> int:
        return self.online["steps"] if self.online is not None else len(self.steps)

    def step_projections(self) -> np.ndarray:
        """(steps, m) float32: every applied update's projection on every canary direction, times B / C."""
        return np.stack(self.steps) if self.steps else np.zeros((0, self.m), dtype=np.float32)

    def inject(self, target, scale: float = 1.0) -> None:
        """Add C * u_i * scale for each inserted canary sampled this step (rate q) to ``target(k)``, the
        tensor that receives parameter k's summed clipped gradient."""
        sampled = self._inserted[self._rng.random(self._inserted.size) < self.sample_rate]
        self.times_sampled[sampled] += 1
        self._mask[:] = False
        self._mask[sampled] = True
        entries = np.flatnonzero(self._mask[self._order]) if sampled.size else np.zeros(0, dtype=np.int64)
        if not entries.size:
            return
        # the sampled entries, grouped by parameter (the flat arrays hold each parameter's entries together, in
        # order): one index_add_ per parameter a sampled canary touches, in the order of its entries
        ks = self._flat_k[entries]
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        sel = torch.from_numpy(entries)
        counts = np.diff(np.r_[starts, ks.size]).tolist()
        where = torch.split(self._flat_w[sel], counts)  # one gather for every touched parameter, then views
        add = torch.split(self._flat_v[sel] * self.clipping_norm * scale, counts)
        for a, w, v in zip(starts.tolist(), where, add):
            t = target(int(ks[a])).view(-1)
            if t.device != w.device or t.dtype != v.dtype:
                w, v = w.to(t.device), v.to(t.device, t.dtype)
            t.index_add_(0, w, v)

    def score(self, grad, expected_batch_size: float) -> None:
        """Accumulate <update, u_i> * B / C from ``grad(k)``, the noisy update applied to parameter k."""
        parts = []
        with torch.no_grad():
            for k in self._index:
                g = grad(k).reshape(-1)
                w, _ = self._placed(k, g.device)
                parts.append(torch.index_select(g, 0, w))
            same = len({(x.device, x.dtype) for x in parts}) <= 1
            if same and parts:  # one product, one copy to the host per step (elementwise: the floats per tensor's)
                flat_v = self._flat_v if parts[0].device == self._flat_v.device else self._placed_all(parts[0].device)
                read = (torch.cat(parts) * flat_v).double().cpu().numpy()
            else:
                read = np.concatenate([(x * self._placed(k, x.device)[1]).double().cpu().numpy()
                                       for k, x in zip(self._index, parts)]) if parts else np.zeros(0)
        # each canary's entries summed in the order read (as np.add.at did, entry by entry): the same floats
        step = np.bincount(self._order, weights=read * expected_batch_size / self.clipping_norm, minlength=self.m)
        self._record(step.astype(np.float64))

    def snapshot(self, prefix: str, tensors: dict) -> dict:
        """What the rest of the run needs (trainers/snapshot.py): the sampling stream's state (JSON) and the
        accumulated scores, counts and per-step projections (tensors, float64 scores kept exact)."""
        tensors[f"{prefix}/scores"] = torch.from_numpy(np.asarray(self.scores, dtype=np.float64).copy())
        tensors[f"{prefix}/times_sampled"] = torch.from_numpy(np.asarray(self.times_sampled, dtype=np.int64).copy())
        tensors[f"{prefix}/steps"] = torch.from_numpy(self.step_projections().copy())
        if self.online is None:
            return {"rng": self._rng.bit_generator.state}
        o = self.online
        tensors[f"{prefix}/online_llr"] = torch.from_numpy(np.asarray(o["llr"], dtype=np.float64).copy())
        tensors[f"{prefix}/online_heldout_ss"] = torch.tensor(o["heldout_ss"], dtype=torch.float64)
        return {"rng": self._rng.bit_generator.state,
                "online": {k: o[k] for k in ("noise_multiplier", "sum_of_squares", "steps")}}

    def restore(self, prefix: str, state: dict, tensors: dict) -> None:
        self._rng.bit_generator.state = state["rng"]
        self.scores = tensors[f"{prefix}/scores"].numpy().copy()
        self.times_sampled = tensors[f"{prefix}/times_sampled"].numpy().copy()
        self.steps = list(tensors[f"{prefix}/steps"].numpy().copy())
        if state.get("online") is not None:
            self.online = {**state["online"], "llr": tensors[f"{prefix}/online_llr"].numpy().copy(),
                           "heldout_ss": [float(x) for x in tensors[f"{prefix}/online_heldout_ss"].tolist()]}

    def to_dict(self) -> dict:
        return {
            "schema_version": 1,
            "kind": self.kind,
            "m": self.m,
            "seed": self.seed,
            "clipping_norm": self.clipping_norm,
            "sample_rate": self.sample_rate,
            "signs": [int(s) for s in self.signs],
            "times_sampled": [int(t) for t in self.times_sampled],
            "scores": [float(s) for s in self.scores],
            "score": "sum over steps of <noisy update, u_i> * B / C (white-box, every update observed)",
            "steps": self.n_steps,
            **({"step_projections": self.step_projections()} if self.online is None else {  # <name>.steps.npy
                "online": {"statistic": "likelihood_ratio", "sample_rate": self.sample_rate,
                           "noise_multiplier": self.online["noise_multiplier"], "steps": self.online["steps"],
                           "values": self.online["steps"] * self.m, "sum_of_squares": self.online["sum_of_squares"],
                           "llr": [float(v) for v in self.online["llr"]]}}),
        }


class DenseGradientCanaries(GradientCanaries):
    """``dense`` canaries: u_i = C / sqrt(d) * s_j * H[i, j mod n] on *every* one of the d trainable coordinates
    (s_j random signs, H the n x n Sylvester-Hadamard matrix, n the power of two >= m). Rows of H are
    orthogonal, so the canaries are orthogonal up to the uneven bucket sizes (|<u_i, u_l>| <= n / d). This is
    the direction in which per-coordinate noise with a heavy-tailed law leaks the most (LMO-DP's d-dimensional
    flaw); a Dirac canary probes one coordinate, which is what a scalar analysis covers. Injection and
    scoring cost O(d + n^2) per step: the update is folded into n buckets, then multiplied by H."""

    @classmethod
    def plan(cls, m: int, kind: str, seed: int, params: list[torch.nn.Parameter], clipping_norm: float,
             sample_rate: float) -> GradientCanaries:
        if m < 2:
            raise DpauditError(f"gradient canaries need m >= 2, got {m}")
        rng = np.random.default_rng([seed, 31337])
        gc = cls(m, "dense", seed, clipping_norm, sample_rate, rng.choice([-1, 1], size=m), None, np.zeros(m),
                 np.zeros(m, dtype=int))
        gc._params_shape = [(p.numel(), p.device) for p in params]
        return gc

    def start(self, seed: int) -> None:
        from scipy.linalg import hadamard

        self._rng = np.random.default_rng([seed, self.seed, 99991])
        self._inserted = np.flatnonzero(self.signs > 0)
        self.steps = []
        self.n = 1 << max(1, (self.m - 1).bit_length())
        sizes = [n for n, _ in self._params_shape]
        self.d = int(sum(sizes))
        self._offsets = np.cumsum([0] + sizes[:-1])
        self._H = {}
        self._signs = []
        for k, (n, dev) in enumerate(self._params_shape):
            g = torch.Generator(device=dev).manual_seed(int(self.seed) * 1_000_003 + k)
            self._signs.append((torch.randint(0, 2, (n,), generator=g, device=dev, dtype=torch.int8) * 2 - 1))
        self._hadamard = torch.tensor(hadamard(self.n), dtype=torch.float32)
        self._index = {k: None for k in range(len(sizes))}

    def _h(self, device) -> torch.Tensor:
        if device not in self._H:
            self._H[device] = self._hadamard.to(device)
        return self._H[device]

    def _buckets(self, k: int, device) -> torch.Tensor:
        return (torch.arange(self._params_shape[k][0], device=device) + int(self._offsets[k])) % self.n

    def inject(self, target, scale: float = 1.0) -> None:
        sampled = self._inserted[self._rng.random(self._inserted.size) < self.sample_rate]
        self.times_sampled[sampled] += 1
        if sampled.size == 0:
            return
        for k in self._index:
            t = target(k).view(-1)
            mask = torch.zeros(self.n, device=t.device)
            mask[torch.as_tensor(sampled, device=t.device)] = 1.0
            v = self._h(t.device) @ mask  # sum of the sampled canaries' rows of H (H is symmetric)
            add = v[self._buckets(k, t.device)] * self._signs[k].to(t.dtype) * (self.clipping_norm * scale / self.d ** 0.5)
            t.add_(add.to(t.dtype))

    def score(self, grad, expected_batch_size: float) -> None:
        with torch.no_grad():
            folded = None
            for k in self._index:
                g = grad(k).reshape(-1)
                if folded is None:
                    folded = torch.zeros(self.n, device=g.device, dtype=torch.float64)
                folded.index_add_(0, self._buckets(k, g.device), (g * self._signs[k].to(g.dtype)).double())
            proj = (self._h(folded.device).double() @ folded)[: self.m] / self.d ** 0.5
        self._record(proj.cpu().numpy() * expected_batch_size / self.clipping_norm)
