"""The probe for DP code that is not an Opacus optimizer (docs/probe.md "Any loop"): two calls around the noise.

    probe = dpaudit.api.functional_probe([p.shape for p in params], sample_rate=q, clipping_norm=C,
                                         noise_multiplier=sigma, expected_batch_size=B)
    for batch in poisson_batches:
        clipped_sum = ...                                   # sum over the batch of the clipped per-record gradients
        clipped_sum = probe.add_canaries(clipped_sum, records=len(batch))   # 1. before the noise
        update = [(s + sigma * C * noise) / B for s in clipped_sum]          # your mechanism, unchanged
        probe.observe(update)                               # 2. the update the optimizer applies
        ...apply update...
    probe.save(model_dir, weights=params)                   # the final weights: the record is tied to them

Tensors or NumPy arrays, in a list, tuple or dict (the probe's order: the ``shapes`` it was made with). The
canaries are Dirac (or sparse, dense) directions on these coordinates (``coordinates="model"``): each sampled
inserted canary adds C u_i to the clipped sum, as a record of norm C would; ``observe`` reads the update's
projections on them, the noise on a fixed sample of coordinates of every tensor (the update times B minus the sum
that went in), and the records counted by ``add_canaries``. The same core, checks and record as the Opacus
adapter (dpaudit/probe/core.py): noise, sampling, clipping (the norm bound b C of each clipped sum), steps and
divisor; clip canaries and coverage need an optimizer's clipping and the model, and are reported not tested.
Given the final weights at save (``weights=``, the same container), the record fingerprints them, and the check
``weights`` compares the checkpoint's safetensors files with them (dpaudit/probe/fingerprint.py); without, that
check is not tested, saying how to give them.
"""

from __future__ import annotations

import numpy as np
import torch

from dpaudit.errors import DpauditError
from dpaudit.probe.canaries import GradientCanaries
from dpaudit.probe.core import ProbeCore
from dpaudit.probe.meters import NoiseMeter, norms
from dpaudit.probe.online import Online
from dpaudit.probe.settings import ProbeSettings

NOT_FUNCTIONAL = ("coordinates", "clip_canaries", "record_steps")  # settings of an optimizer's probe only


class _Slot:
    """One tensor of the update as the noise meter reads it (``summed_grad`` before the noise, ``grad`` after)."""

    def __init__(self, shape: tuple, device):
        self.shape, self.device = shape, device
        self.summed_grad = self.grad = None

    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class FunctionalProbe(ProbeCore):
    """White-box canaries and run-time readings for a hand-written DP step (see the module docstring), with the
    probe's ``settings`` (:class:`dpaudit.probe.settings.ProbeSettings`, or its fields as keywords) and the step's
    own C, σ and divisor B."""

    mode = "functional"

    def __init__(self, shapes, settings: ProbeSettings | None = None, *, clipping_norm: float, noise_multiplier: float,
                 expected_batch_size: float, names: list[str] | None = None, noise_coordinates: int = 1024,
                 device=None, **options):
        given = {k for k in options if k in NOT_FUNCTIONAL}
        if given:
            raise DpauditError(f"the functional probe's canaries are on the step's own tensors: "
                               f"{', '.join(sorted(given))} do(es) not apply; leave it out")
        s = self.settings = ProbeSettings.of(settings, options)  # every setting checked there, once
        if s.clip_canaries != ProbeSettings.clip_canaries or not s.record_steps:
            raise DpauditError("the functional probe records every step and plants no clip canaries: leave "
                               "clip_canaries and record_steps at their defaults")
        sample_rate, m, kind, seed = s.sample_rate, s.m, s.kind, s.seed
        on_fail, dataset_size, sampler = s.on_fail, s.dataset_size, s.sampler
        for what, v in (("clipping_norm", clipping_norm), ("expected_batch_size", expected_batch_size)):
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) and v > 0):
                raise DpauditError(f"the functional probe needs {what} > 0 (the C and divisor your step uses), got {v!r}")
        if not (isinstance(noise_multiplier, (int, float)) and not isinstance(noise_multiplier, bool)
                and np.isfinite(noise_multiplier) and noise_multiplier >= 0):
            raise DpauditError(f"noise_multiplier must be the sigma your step adds (>= 0), got {noise_multiplier!r}")
        self.sampler = sampler
        self.keys, shapes = _shapes(shapes)
        if names is not None and len(names) != len(shapes):
            raise DpauditError(f"names has {len(names)} entries for {len(shapes)} tensors")
        dev = torch.device(device) if device is not None else torch.device("cpu")
        self.slots = [_Slot(s, dev) for s in shapes]
        self.private, self.coordinates, self.ghost, self.world, self.n_clip = True, "model", False, 1, 0
        self.sample_rate, self.clipping_norm = float(sample_rate), float(clipping_norm)
        self.noise_multiplier, self.divisor = float(noise_multiplier), float(expected_batch_size)
        self.divisor_from, self.dataset_size = "given", dataset_size
        self._meter_units = self.divisor  # the meter reads the update: noise / B
        self.optimizer_name = "functional interface"
        self.canaries = GradientCanaries.plan(m, kind, seed, self.slots, self.clipping_norm, self.sample_rate)
        self.canaries.start(seed)
        self.meter = NoiseMeter(self.slots, per_tensor=noise_coordinates, seed=seed)
        self.coverage = None
        self.online = Online(noise_multiplier=self.noise_multiplier, tensors=len(shapes), sample_rate=self.sample_rate,
                             dataset_size=dataset_size, on_fail=on_fail, sampler=sampler)
        self.tensor_names = list(names) if names is not None else \
            [str(k) if self.keys is not None else f"tensor {i} {tuple(s)}" for i, (k, s) in
             enumerate(zip(self.keys or [None] * len(shapes), shapes))]
        self._init_readings()
        self._pending = None  # (records, clipped-sum ratio) between add_canaries and observe
        self._final = None  # the final weights given to save (torch tensors, the probe's order)

    # -- the two calls -------------------------------------------------------------------------------------------

    def add_canaries(self, clipped_sum, records: int):
        """Call between your clipped sum and your noise, once per noisy step: ``clipped_sum`` is the sum over the
        step's records (or users) of their clipped gradients, ``records`` how many there were. Checks the sum's
        norm against ``records`` C, adds the canaries sampled this step (C u_i each) and returns the sum to noise
        (the same container; torch tensors and writable arrays are changed in place)."""
        if self._pending is not None:
            raise DpauditError("add_canaries was called twice without observe(update) between: call observe once "
                               "after each noisy step")
        if not isinstance(records, (int, np.integer)) or isinstance(records, bool) or records < 0:
            raise DpauditError(f"records must be the number of records (or users) in this step's batch, got {records!r}")
        out, tensors = self._tensors(clipped_sum, "clipped_sum", writable=True)
        step = len(self.records) + 1
        self.online.step = step
        with torch.no_grad():
            sq = float(norms(tensors).pow(2).sum())
        ratio = (0.0 if sq == 0 else float("inf")) if records == 0 else float(np.sqrt(sq)) / (records * self.clipping_norm)
        self.canaries.inject(lambda k: tensors[k])
        for slot, t in zip(self.slots, tensors):
            slot.summed_grad = t
        self.meter.before(scale=1.0 / self.divisor)
        for slot in self.slots:
            slot.summed_grad = None
        self._pending = (int(records), ratio)
        return out

    def observe(self, update) -> None:
        """Call once per noisy step, after your noise: ``update`` is what the optimizer applies as the gradient,
        (the sum from add_canaries + noise) / expected_batch_size. Reads the canaries' projections and the noise,
        and runs the online checks (``on_fail``)."""
        if self._pending is None:
            raise DpauditError("observe(update) was called without add_canaries(clipped_sum, records) before it: call "
                               "add_canaries before the noise and observe after it, once per noisy step")
        _, tensors = self._tensors(update, "update", writable=False)
        for slot, t in zip(self.slots, tensors):
            slot.grad = t
        self._noise_read(self.meter.after(), units=self.divisor)
        for slot in self.slots:
            slot.grad = None
        (rows, ratio), self._pending = self._pending, None
        self._close_step(rows, ratio, lambda k: tensors[k])
        self._online_after_step()

    def save(self, folder, stem: str = "gradient_canaries", *, weights=None) -> list:
        """Write the record beside a saved model (``folder``), as every probe does; ``weights``: the final weights
        (the container and shapes of ``shapes``: tensors or arrays, a JAX array too), fingerprinted into the record
        so that ``dpaudit evaluate`` can tell whether the weights saved beside it are these (the check ``weights``)."""
        if weights is not None:
            final = []
            for i, x in enumerate(self._items(weights, "weights")):
                t, _ = _as_tensor(x, writable=False)
                if tuple(t.shape) != self.slots[i].shape or not t.is_floating_point():
                    raise DpauditError(f"weights[{self.tensor_names[i]}] must be a float tensor of the probe's shape "
                                       f"{self.slots[i].shape}, got {t.dtype} {tuple(t.shape)}")
                final.append(t)
            self._final = final
        return super().save(folder, stem)

    def _weights(self) -> dict | None:
        from dpaudit.probe import fingerprint

        if self._final is None:
            return fingerprint.not_taken("the functional probe was not given the final weights; pass them when saving "
                                         "(probe.save(folder, weights=params))")
        return self._fingerprint(list(zip(self.tensor_names, self._final)))

    # -- containers ----------------------------------------------------------------------------------------------

    def _items(self, value, what: str) -> list:
        """The tensors or arrays of container ``value`` in the probe's order (a dict with its keys, or a list)."""
        if self.keys is not None:
            if not isinstance(value, dict) or set(value) != set(self.keys):
                raise DpauditError(f"{what} must be a dict with the keys the probe was made with ({len(self.keys)} "
                                   f"tensors), got {type(value).__name__}")
            return [value[k] for k in self.keys]
        if not isinstance(value, (list, tuple)) or len(value) != len(self.slots):
            got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            raise DpauditError(f"{what} must be a list of {len(self.slots)} tensors or arrays (the probe's "
                               f"shapes, in order), got {got}")
        return list(value)

    def _tensors(self, value, what: str, *, writable: bool):
        """(the container to return, its tensors as torch tensors in the probe's order, sharing memory where they
        can). Shapes must be the probe's."""
        items = self._items(value, what)
        tensors, back = [], []
        for i, (x, slot) in enumerate(zip(items, self.slots)):
            t, same = _as_tensor(x, writable)
            if tuple(t.shape) != slot.shape:
                raise DpauditError(f"{what}[{self.tensor_names[i]}] has shape {tuple(t.shape)}, the probe's is "
                                   f"{slot.shape}")
            if not t.is_floating_point():
                raise DpauditError(f"{what}[{self.tensor_names[i]}] is {t.dtype}, not floating point")
            if not t.is_contiguous():
                t, same = t.contiguous(), False
            if t.device != slot.device:  # the first step fixes where the meter's indices live
                if len(self.records) or self._pending is not None:
                    raise DpauditError(f"{what}[{self.tensor_names[i]}] is on {t.device}, earlier steps on "
                                       f"{slot.device}")
                self._move(t.device)
            tensors.append(t)
            back.append(x if same else (t if isinstance(x, torch.Tensor) else t.numpy()))
        if self.keys is not None:
            return dict(zip(self.keys, back)), tensors
        return type(value)(back) if isinstance(value, tuple) else back, tensors

    def _move(self, device) -> None:
        for s in self.slots:
            s.device = device
        self.meter.index = [ix.to(device) for ix in self.meter.index]
        self.meter._seg = {}


def _shapes(shapes):
    """(dict keys or None, tuple shapes) from shapes, or tensors / arrays whose shapes are taken."""
    keys = None
    if isinstance(shapes, dict):
        keys, shapes = list(shapes), list(shapes.values())
    if not isinstance(shapes, (list, tuple)) or not shapes:
        raise DpauditError("the functional probe needs the shapes of the tensors your step updates (a non-empty list "
                           "or dict of shapes, tensors or arrays)")
    out = []
    for s in shapes:
        shape = tuple(s.shape) if hasattr(s, "shape") else s
        try:
            if isinstance(shape, (str, bytes)) or any(isinstance(d, (str, bytes, float, bool)) for d in shape):
                raise TypeError
            shape = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise DpauditError(f"not a shape, tensor or array: {str(s)[:80]!r}; pass each tensor's shape as a "
                               "tuple of integers, or the tensors themselves") from None
        if any(d < 0 for d in shape):
            raise DpauditError(f"not a shape: {shape}")
        out.append(shape)
    return keys, out


def _as_tensor(x, writable: bool):
    """(a torch tensor over ``x``'s memory where possible, whether it is ``x`` itself or shares its memory)."""
    if isinstance(x, torch.Tensor):
        return x.detach(), True
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise DpauditError(f"expected a float tensor or array, got dtype {a.dtype}")
    shares = a is x and a.flags.writeable and a.flags.c_contiguous
    if not shares and writable:
        a = np.array(a, copy=True, order="C")
    elif not a.flags.writeable or not a.flags.c_contiguous:
        a = np.array(a, copy=True, order="C")
    return torch.from_numpy(a), shares
