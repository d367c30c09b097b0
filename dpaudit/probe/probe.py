"""The white-box probe: gradient canaries and run-time readings on any Opacus DP optimizer (docs/probe.md).

    probe = dpaudit.api.attach_probe(optimizer, sample_rate=q, m=1000, seed=0)   # after make_private
    ...train as usual...
    probe.save(model_dir)   # gradient_canaries.json, its per-step projections and the probe's readings

One implementation for every loop: dpaudit's own engine attaches the same class (``coordinates="model"``).
On each logical step of an Opacus ``DPOptimizer`` (hooks or ghost clipping, ``DistributedDPOptimizer``, and
dpaudit's user-level optimizer) it

1. counts the records of every physical batch (rows of the per-sample gradients, or of the per-sample norms
   under ghost clipping) and, before the noise, checks that the clipped sum has norm <= b C (b records);
2. adds each inserted canary sampled this step (Poisson at ``sample_rate``, the probe's own generator) as
   C u_i to the clipped sum before the noise, where a record's clipped gradient goes; *clip canaries*
   (coordinates ``block``, hooks mode) instead enter as per-sample gradients of norm 4 C through the
   optimizer's own clipping, so an optimizer that does not clip lets them out at 4 C;
3. after the base optimizer's step (after scaling and, under DDP, the all-reduce), projects the noisy update
   on every canary direction, in units of C / D (D the optimizer's divisor: expected batch x world size).

Canary coordinates are either a dedicated parameter block (``block``, the default: a parameter the forward
pass never reads, added to the optimizer's last parameter group: no effect on the model, no records' gradients
along the canaries) or the model's trainable coordinates (``model``: the audit also sees the records' own
gradients; what dpaudit's trainers use, so their committed numbers stay). The readings are checked against the
privacy card at evaluation (dpaudit/audit/mechanism_checks.py).

(Over 300 lines on purpose: this is the whole Opacus adapter — row counts of physical batches, the canary block,
clip canaries through the optimizer's own clipping, the refusals; what it shares with the other adapters is in
dpaudit/probe/core.py.)
"""

from __future__ import annotations

import numpy as np
import torch

from dpaudit import opacus_private as op
from dpaudit.errors import DpauditError
from dpaudit.probe import sharded
from dpaudit.probe.canaries import GradientCanaries
from dpaudit.probe.core import CLIP_EXACT_TOLERANCE, CLIP_MULTIPLE, SUM_TOLERANCE, ProbeCore
from dpaudit.probe.meters import Coverage, NoiseMeter, norms
from dpaudit.probe.online import Online
from dpaudit.probe.settings import COORDINATES, ProbeSettings

__all__ = ["CLIP_EXACT_TOLERANCE", "CLIP_MULTIPLE", "COORDINATES", "SUM_TOLERANCE", "Probe", "attach", "unwrap"]


class Probe(ProbeCore):
    """White-box canaries and readings attached to one optimizer, with the probe's ``settings``
    (:class:`dpaudit.probe.settings.ProbeSettings`, or its fields as keywords). The other keywords are what
    dpaudit's trainers set beside them: the parameters to probe (``params``), the canaries' sampling stream
    (``stream_seed``), the divisor (``expected_batch_size``), ``private=False`` (dpaudit's non-private baselines
    only: the canaries go into the mean gradient of a plain torch optimizer, whose ``clipping_norm`` is given),
    the ``model`` (coverage), the σ of the online checks (``noise_multiplier``), the noise meter's coordinates per
    tensor and the run's identity (``run_id``).
    Over 8 parameters: the trainers' settings beside the probe's, each documented above; internal."""

    def __init__(self, optimizer, settings: ProbeSettings | None = None, *, params: list | None = None,
                 stream_seed: int | None = None, expected_batch_size: float | None = None, private: bool = True,
                 clipping_norm: float | None = None, model=None, noise_multiplier: float | None = None,
                 noise_coordinates: int = 1024, run_id: str | None = None, **options):
        s = self.settings = ProbeSettings.of(settings, options)  # every setting checked there, once
        sample_rate, m, kind, seed, coordinates = s.sample_rate, s.m, s.kind, s.seed, s.coordinates
        clip_canaries, record_steps, on_fail, dataset_size, sampler = (s.clip_canaries, s.record_steps, s.on_fail,
                                                                       s.dataset_size, s.sampler)
        optimizer = unwrap(optimizer) if private else optimizer
        if private and not (hasattr(optimizer, "add_noise") and hasattr(optimizer, "original_optimizer")):
            raise DpauditError(f"attach the probe to an Opacus DPOptimizer (the optimizer make_private returns), "
                               f"got {type(optimizer).__name__}")
        self.sampler = sampler
        if private:
            _refuse_unsupported(optimizer, coordinates)
        self.optimizer, self.private, self.coordinates = optimizer, private, coordinates
        self.sample_rate = float(sample_rate)
        self.ghost = private and _is_ghost(optimizer)
        self.fsdp = private and sharded.is_fsdp(optimizer)
        if self.fsdp:
            if coordinates != "block":
                raise DpauditError("under FSDP the probe's canaries go on a block (coordinates='block'); the model's "
                                   "coordinates are sharded across the ranks")
            sharded.check_model(model)
        self._rows_model = model
        self.world = int(getattr(optimizer, "world_size", 1)) if private else 1
        self.rank = int(getattr(optimizer, "rank", 0)) if private else 0
        if private and not isinstance(getattr(optimizer, "max_grad_norm", None), (int, float)):
            raise DpauditError(f"the probe reads the clipping norm C from optimizer.max_grad_norm, which is "
                               f"{getattr(optimizer, 'max_grad_norm', None)!r} on this {type(optimizer).__name__}; attach "
                               "it to the DP optimizer make_private returned")
        C = float(optimizer.max_grad_norm) if private else clipping_norm
        if C is None or not C > 0:
            raise DpauditError(f"the probe needs the clipping norm C > 0 (a non-private optimizer: pass clipping_norm), "
                               f"got {C!r}")
        self.divisor_from = "given"  # the divisor the caller passed
        if expected_batch_size is None:
            if not private:
                raise DpauditError("a probe on a non-private optimizer needs expected_batch_size")
            expected_batch_size = float(optimizer.expected_batch_size) * self.world
            self.divisor_from = "optimizer"  # Opacus' int(len(dataset) * q) x world: compared with the card's q N
            if getattr(optimizer, "loss_reduction", "mean") == "sum":
                expected_batch_size = 1.0  # the noisy sum is not divided
                self.divisor_from = "sum"
        self.divisor = float(expected_batch_size)
        self.dataset_size = dataset_size
        self.model_params = [p for g in optimizer.param_groups for p in g["params"] if p.requires_grad] \
            if params is None else list(params)
        if not self.model_params:
            raise DpauditError("the optimizer has no trainable parameters to probe")
        self.block = None
        self.n_clip = clip_canaries if coordinates == "block" and private else 0
        if coordinates == "block":
            dev = self.model_params[0].device
            self.block = torch.nn.Parameter(torch.zeros(m + self.n_clip, device=dev, dtype=torch.float32))
            # in the last parameter group, not a new one: learning-rate schedulers keep one rate per existing group.
            # Its values change with the steps, harmlessly: nothing reads them, the probe reads its gradient.
            optimizer.param_groups[-1]["params"].append(self.block)
            if self.fsdp:
                sharded.prepare_block(optimizer, self.block)
            if private:  # what DPOptimizer.__init__ gives its own parameters: a loop may step before any zero_grad
                self.block.grad_sample = None
                self.block.summed_grad = None
                if isinstance(getattr(optimizer, "max_grad_norms", None), list):  # per-layer clipping: one C each
                    optimizer.max_grad_norms.append(C)  # the block's records' rows are zero: nothing of theirs changes
            canary_params = [self.block[:m]]
        else:
            canary_params = self.model_params
        self.canaries = GradientCanaries.plan(m, kind, seed, canary_params, C, self.sample_rate)
        self.canaries.start(seed if stream_seed is None else stream_seed)
        if not record_steps:
            if not private:
                raise DpauditError("record_steps=False needs a DP optimizer (its sigma fixes the likelihood ratio)")
            self.canaries.go_online(float(optimizer.noise_multiplier))
        self._clip_rng = np.random.default_rng([seed, 7919])
        self.clipping_norm = C
        self.noise_multiplier = float(getattr(optimizer, "noise_multiplier", 0.0)) if private else None
        self._init_readings(run_id)
        optimizer._dpaudit_probe_runs = [*getattr(optimizer, "_dpaudit_probe_runs", []), self.run_id]  # for the card
        self._rows = 0
        self._ratio = 0.0
        self._clip_mask = None
        self.optimizer_name = type(optimizer).__name__
        self.meter = self.coverage = self.online = None
        self.tensor_names = []
        if private:
            dp_params = [p for g in optimizer.param_groups for p in g["params"]]
            # one meter per optimizer: a second probe on it (dpaudit's trainers plant dirac+dense sets) would read the
            # first one's canaries, added between its two readings, as noise
            first = not getattr(optimizer, "_dpaudit_probed", False)
            optimizer._dpaudit_probed = True
            self.meter = (NoiseMeter(dp_params, per_tensor=noise_coordinates, seed=seed, **self._sharded_meter(dp_params))
                          if first else None)
            self.coverage = Coverage(model, [p for p in dp_params if p is not self.block]) \
                if model is not None and not self.fsdp else None
            sigma = self.noise_multiplier if noise_multiplier is None else float(noise_multiplier)
            self.online = Online(noise_multiplier=sigma, tensors=len(dp_params), sample_rate=self.sample_rate,
                                 dataset_size=dataset_size, on_fail=on_fail, sampler=sampler)
            self.tensor_names = _tensor_names(model, dp_params, self.block)
            self._watched = [(p, n) for p, n in zip(dp_params, self.tensor_names) if p is not self.block]
        if private:
            self._wrap_private()
        else:
            self._wrap_plain(expected_batch_size)

    def save(self, folder, stem: str = "gradient_canaries", *, weights=None) -> list:
        """Write the record beside a saved model (``folder``): see :meth:`ProbeCore.save`. ``weights``: what the loop
        releases in place of the optimizer's last iterate, an average of its iterates (an EMA, ``AveragedModel``:
        post-processing, as private as the iterates), or under FSDP the full state dict rank 0 gathered to save the
        model (each rank holds only shards), fingerprinted instead of the optimizer's own tensors so that the check
        ``weights`` ties the record to the released model. A module or a ``{name: tensor}`` dict (its names
        matched to those the probe knows from ``attach_probe(..., model=model)``; ``AveragedModel``'s ``module.``
        set aside), or the tensors in the optimizer's parameter order."""
        if weights is not None:
            self.watch_released(weights)
        return super().save(folder, stem)

    def watch_released(self, weights) -> None:
        """Fingerprint ``weights`` (see :meth:`save`) instead of the optimizer's own tensors when the record is
        written; one line naming a mismatch. dpaudit's FSDP trainer gives rank 0's gathered model this way."""
        self._given = self._released(weights)

    def _released(self, weights) -> list:
        """The released tensors in the order of the watched ones (see :meth:`save`)."""
        from dpaudit.probe.fingerprint import names_match

        watched = getattr(self, "_watched", [])
        if not watched:
            raise DpauditError("weights= needs a probe on a DP optimizer (a non-private probe watches no weights)")
        if isinstance(weights, torch.nn.Module):
            weights = dict(weights.named_parameters())
        if isinstance(weights, dict):
            if any(n.startswith("param ") for _, n in watched):
                raise DpauditError("weights= as a module or dict needs the parameters' names: attach the probe with "
                                   "attach_probe(optimizer, ..., model=model), or give the tensors in the optimizer's order")
            given = []
            for p, n in watched:
                hits = [t for k, t in weights.items()
                        if isinstance(t, torch.Tensor) and names_match(str(k), n) and tuple(t.shape) == tuple(p.shape)]
                if len(hits) != 1:
                    raise DpauditError(f"weights= holds {len(hits)} tensors of the name and shape of {n[:80]} "
                                       f"{tuple(p.shape)}; give the released model, whose names are the trained one's")
                given.append(hits[0])
        else:
            if isinstance(weights, (str, bytes, torch.Tensor)) or not hasattr(weights, "__iter__"):
                raise DpauditError(f"weights= must be a module, a {{name: tensor}} dict or a list of tensors, got "
                                   f"{type(weights).__name__}")
            given = list(weights)
            if len(given) != len(watched):
                raise DpauditError(f"weights= holds {len(given)} tensors; the DP optimizer trains {len(watched)} "
                                   "(give them in its parameter order)")
        for t, (p, n) in zip(given, watched):
            if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(p.shape) or not t.is_floating_point():
                raise DpauditError(f"weights= for {n[:80]} must be a float tensor of shape {tuple(p.shape)}, got "
                                   f"{type(t).__name__} {tuple(getattr(t, 'shape', ()))}")
        return given

    def _weights(self) -> dict | None:
        from dpaudit.probe import fingerprint

        watched = getattr(self, "_watched", [])
        if not watched:
            return None
        given = getattr(self, "_given", None)
        if given is not None:
            return {**self._fingerprint([(n, t) for t, (_, n) in zip(given, watched)]), "given": True}
        if self.fsdp:
            return fingerprint.not_taken("under FSDP each rank holds a shard of every parameter; give rank 0's full "
                                         "state dict, the one the model is saved from, at save: probe.save(folder, "
                                         "weights=get_model_state_dict(model, options=StateDictOptions("
                                         "full_state_dict=True, cpu_offload=True)))")
        return self._fingerprint([(n, p) for p, n in watched])

    # -- wiring ---------------------------------------------------------------------------------------------

    def _sharded_meter(self, dp_params: list) -> dict:
        """Under FSDP: the meter reads every rank's shard and sums over the ranks (dpaudit/probe/sharded.py)."""
        if not self.fsdp:
            return {}
        self._meter_units = float(self.world)  # each shard's noise is sigma C / W
        opt = self.optimizer

        def read(p, attr):
            t = sharded.summed(opt, p) if attr == "summed_grad" else p.grad
            return None if t is None else sharded.local(t)

        block = next((i for i, p in enumerate(dp_params) if p is self.block), None)
        self._reducer = sharded.Reducer(self.block.device, block, self.rank)
        return {"local": sharded.local, "read": read, "reduce": self._reducer}

    def _block_sum(self):
        """The block's clipped sum (the FSDP optimizer keeps it in its grad_state)."""
        return sharded.summed(self.optimizer, self.block) if self.fsdp else self.block.summed_grad

    def _target(self, k: int, attr: str):
        """Parameter k's tensor ``attr`` (summed_grad or grad) seen by the canaries: a view of the block or the model
        parameter's own."""
        if self.block is not None:
            t = self._block_sum() if attr == "summed_grad" else getattr(self.block, attr)
            return t[: self.canaries.m]
        return getattr(self.model_params[k], attr)

    def _wrap_private(self) -> None:
        opt = self.optimizer
        orig_acc = opt.accumulate if self.ghost else opt.clip_and_accumulate
        orig_pre, orig_noise, base = opt.pre_step, opt.add_noise, opt.original_optimizer
        orig_step = base.step

        def pre_step(*args, **kwargs):  # every physical batch, before Opacus reads the per-sample gradients
            self._rows += self._count_rows()
            if self.block is not None:
                self._zero_block_rows()
            return orig_pre(*args, **kwargs)

        def add_noise():
            step = len(self.records) + 1
            self.online.step = step
            ratio, now = self._sum_ratio() if not self.fsdp else (None, None)  # FSDP: read with the noise's reduce
            if self.coverage is not None:
                for name in self.coverage.before_noise(step, now):
                    self.online.deterministic("coverage", f"parameter {name} of the DP optimizer changed between two "
                                              "of its steps: something else updates it (a second optimizer, a hand-"
                                              "written update)")
            if ratio is not None:
                self._ratio = max(self._ratio, ratio)
            # under DDP the canaries enter the sum once, from rank 0; under FSDP at 1 / W, as the averaged sum holds
            # a record's clipped gradient
            share = (1.0 / self.world if self.fsdp else 1.0) if self.rank == 0 else 0.0
            self.canaries.inject(lambda k: self._target(k, "summed_grad"), share)
            if self.n_clip:
                self._inject_clip(orig_acc, share)
            # under DDP the noise is rank 0's; under FSDP each rank noises its own shard (read on all, summed)
            metered = (self.rank == 0 or self.fsdp) and self.meter is not None
            if self.fsdp:  # the whole sum's norm and records, summed over the ranks with the noise's readings
                pending = sharded.local_sum(self.optimizer, self.model_params, self._rows)
                if metered:
                    self._reducer.extra = pending
            if metered:
                self.meter.before()
            out = orig_noise()
            if metered:  # in the units of the sum: C^2 (C^2 / W^2 under FSDP) makes it sigma^2 per coordinate
                self._noise_read(self.meter.after(), units=self._meter_units)
            if self.fsdp:
                sq, b = self._reducer.reduced if metered else sharded.all_reduce_sum(pending, self.block.device)
                self._fsdp_rows = int(round(b))
                self._ratio = max(self._ratio, sharded.ratio(sq, b, self.clipping_norm, self.world))
            return out

        def step(*args, **kwargs):
            out = orig_step(*args, **kwargs)
            self._observe()
            self._online_after_step()
            return out

        opt.pre_step = pre_step
        opt.add_noise = add_noise
        base.step = step

    def _wrap_plain(self, batch: float) -> None:
        opt = self.optimizer
        orig_step = opt.step
        params = self.model_params

        def step(*args, **kwargs):
            for p in params:  # a step with no unit sampled (user level) has no gradient to add to
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            self.canaries.inject(lambda k: params[k].grad, 1.0 / batch)
            self.canaries.score(lambda k: params[k].grad, batch)
            return orig_step(*args, **kwargs)

        opt.step = step

    def _count_rows(self) -> int:
        if self.fsdp:
            return sharded.rows(self._rows_model)
        p = self.model_params[0]
        if self.ghost:
            ns = op.norm_sample(p)
            return 0 if ns is None else int(ns.shape[0])
        gs = getattr(p, "grad_sample", None)
        if gs is None or (isinstance(gs, list) and any(g is None for g in gs)):
            return 0
        return sum(int(g.shape[0]) for g in gs) if isinstance(gs, list) else int(gs.shape[0])

    def _zero_block_rows(self) -> None:
        """The records' per-sample gradients (or summed gradient, ghost) on the block: zero, the forward never reads
        it; shaped like the model's so Opacus' clipping sees one row per record."""
        b = self.block
        if self.ghost:
            b.grad = torch.zeros_like(b)
            return
        gs = self.model_params[0].grad_sample
        if gs is None or (isinstance(gs, list) and any(g is None for g in gs)):
            return  # no per-sample gradients this step (e.g. a forward outside no_grad after the backward): Opacus'
            # own step raises its clear "Per sample gradient is not initialized", the probe adds nothing of its own
        rows = [int(g.shape[0]) for g in gs] if isinstance(gs, list) else [int(gs.shape[0])]
        zeros = [torch.zeros(r, b.numel(), device=b.device, dtype=b.dtype) for r in rows]
        b.grad_sample = zeros if isinstance(gs, list) else zeros[0]

    def _sum_ratio(self) -> tuple[float, torch.Tensor | None]:
        """(||clipped sum over the model's parameters|| / (b C) of this logical step on this rank, the coverage's
        parameter norms now or None): one fused norm call for both. Under FSDP the whole sum's, in add_noise."""
        ts = [p.summed_grad for p in self.model_params if getattr(p, "summed_grad", None) is not None]
        cov = self.coverage.dp_params if self.coverage is not None and self.coverage.armed else []
        with torch.no_grad():  # one fused norm per tensor (float32 suffices at SUM_TOLERANCE), one sync per step
            both = norms(cov + ts) if cov or ts else torch.zeros(0)
            sq = float(both[len(cov):].pow(2).sum())
        now = both[:len(cov)] if cov else None
        if self._rows == 0:
            return (0.0 if sq == 0 else float("inf")), now
        return float(np.sqrt(sq)) / (self._rows * self.clipping_norm), now

    def _inject_clip(self, orig_acc, share: float) -> None:
        """Clip canaries sampled this step: in hooks mode, per-sample rows of norm 4 C on the block's last
        coordinates, through the optimizer's own clipping (only the block's parameter group is visible for that
        call); under ghost clipping, where per-sample clipping happens inside the loss's backward, added at C."""
        mask = self._clip_rng.random(self.n_clip) < self.sample_rate
        self._clip_mask = mask
        self.clip_exact.append(float("nan"))
        if not mask.any() or share == 0.0:
            return
        m, b = self.canaries.m, self.block
        if self.ghost:
            with torch.no_grad():
                self._block_sum()[m:][torch.from_numpy(mask).to(b.device)] += self.clipping_norm * share
            return
        idx = np.flatnonzero(mask)
        at = torch.as_tensor(m + idx, device=b.device)
        rows = torch.zeros(idx.size, b.numel(), device=b.device, dtype=b.dtype)
        rows[torch.arange(idx.size, device=b.device), at] = CLIP_MULTIPLE * self.clipping_norm
        opt = self.optimizer
        groups = opt.original_optimizer.param_groups
        saved_sample, saved_processed = b.grad_sample, op.processed_flag(b.grad_sample)
        per_layer = getattr(opt, "max_grad_norms", None)
        before = b.summed_grad[at].detach().double().clone() if b.summed_grad is not None else 0.0
        opt.original_optimizer.param_groups = [{**groups[-1], "params": [b]}]  # the block alone
        try:
            if isinstance(per_layer, list):
                opt.max_grad_norms = [self.clipping_norm]  # the block's own C while it is the only parameter
            b.grad_sample = rows
            orig_acc()
        finally:
            opt.original_optimizer.param_groups = groups
            if isinstance(per_layer, list):
                opt.max_grad_norms = per_layer
            b.grad_sample = saved_sample
            if saved_processed is not None:
                op.restore_processed(saved_sample, saved_processed)
        with torch.no_grad():  # before the noise: each clip canary's contribution, exactly C if it was clipped
            out = (b.summed_grad[at].double() - before) / self.clipping_norm
            dev = float((out - 1.0).abs().max())
        self.clip_exact[-1] = dev
        if not dev <= CLIP_EXACT_TOLERANCE:
            self.online.deterministic("clipping", f"a per-sample gradient of norm {CLIP_MULTIPLE:g} C came out of the "
                                      f"optimizer's clipping at {float(out.max()):.4g} C, not C: per-sample clipping "
                                      "is not enforced")

    def _observe(self) -> None:
        """After a real step: the update's projections, this step's records and the clipped-sum reading."""
        rows, ratio = self._rows, self._ratio
        if self.fsdp:  # already over all ranks (read with the noise, in add_noise)
            rows = self._fsdp_rows
        elif self.world > 1 and torch.distributed.is_initialized():  # one collective: records summed, worst ratio
            t = torch.tensor([float(rows), ratio], dtype=torch.float64, device=self.model_params[0].device)
            every = [torch.zeros_like(t) for _ in range(self.world)]
            torch.distributed.all_gather(every, t)
            both = torch.stack(every).cpu()
            rows, ratio = int(round(float(both[:, 0].sum()))), float(both[:, 1].max())
        self._rows, self._ratio = 0, 0.0
        self._close_step(rows, ratio, lambda k: self._target(k, "grad"))
        if self.n_clip:
            with torch.no_grad():
                g = self.block.grad[self.canaries.m:].double().cpu().numpy()
            self.clip_proj.append((g * self.divisor / self.clipping_norm).astype(np.float32))
            self.clip_sampled.append(self._clip_mask.copy() if self._clip_mask is not None
                                     else np.zeros(self.n_clip, dtype=bool))
            self._clip_mask = None

    # -- what the probe saw ----------------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        if not self.private:
            return "non-private"
        return "ghost" if self.ghost else "hooks"


# Opacus optimizers the probe cannot serve, and why (docs/probe.md "Loops the probe refuses"): refused when it
# attaches, never a crash in the middle of training.
REFUSED = {
    "AdaClipDPOptimizer": "adaptive clipping changes C (and the noise) every step; the probe checks the one C and "
                          "sigma the card states",
    "DistributedPerLayerOptimizer": "per-layer clipping inside DDP's gradient hooks leaves no clipped sum to read "
                                    "before the noise; use clipping='per_layer' without distributed hooks, or flat",
}


def _refuse_unsupported(optimizer, coordinates: str) -> None:
    for cls in type(optimizer).__mro__:
        if cls.__name__ in REFUSED:
            raise DpauditError(f"the probe cannot attach to Opacus' {cls.__name__}: {REFUSED[cls.__name__]}")
    if coordinates == "block" and getattr(optimizer, "_dpaudit_block", False):
        raise DpauditError("this optimizer already has a probe's canary block; attach one probe per optimizer "
                           "(several canary kinds: coordinates='model')")
    if coordinates == "block":
        optimizer._dpaudit_block = True


def unwrap(optimizer):
    """The Opacus DP optimizer inside a wrapper that steps it (accelerate's ``AcceleratedOptimizer``, which keeps it
    as ``.optimizer``): the probe wires into the DP optimizer itself, so a loop may pass either."""
    inner = optimizer
    while inner is not None and not hasattr(inner, "original_optimizer") and hasattr(inner, "optimizer"):
        inner = inner.optimizer
    return optimizer if inner is None else inner


def _is_ghost(optimizer) -> bool:
    """Opacus' ghost-clipping optimizers clip inside the loss's backward and only accumulate ``p.grad``."""
    from opacus.optimizers.optimizer_fast_gradient_clipping import DPOptimizerFastGradientClipping

    return isinstance(optimizer, DPOptimizerFastGradientClipping)


def _tensor_names(model, params: list, block) -> list[str]:
    """A name per parameter tensor of the optimizer (the model's names when the probe has the model)."""
    names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
    return ["dpaudit probe block" if p is block else names.get(id(p), f"param {i} {tuple(p.shape)}")
            for i, p in enumerate(params)]


def attach(optimizer, settings: ProbeSettings | None = None, *, model=None, **options) -> Probe:
    """Attach a probe to an Opacus DP optimizer (after ``make_private``, before the first step).

    Args:
        optimizer: The DP optimizer ``make_private`` returned (or the Trainer's wrapper of it).
        settings: The probe's settings (:class:`dpaudit.probe.settings.ProbeSettings`); or give its fields as
            keywords in ``options``.
        model: The model the optimizer trains, so the probe also checks that nothing outside the DP optimizer
            moves (coverage).
        **options: ProbeSettings fields (``sample_rate``, ``m``, ``seed``, ...), applied over ``settings``.

    Returns:
        The :class:`Probe`; ``probe.save(model_dir)`` after training.

    Raises:
        DpauditError: A setting out of range, or an optimizer the probe cannot watch (one line each).
    """
    return Probe(optimizer, ProbeSettings.of(settings, options), model=model)
