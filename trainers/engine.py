"""The shared DP engine: sample a batch -> per-unit gradients -> clip -> sum -> noise -> step -> account.

Every DP method is one composition of the same seams (docs/architecture.md):

* data (:mod:`.data`): padded tensors, Poisson sampling of records or users, physical batches;
* the task loss (:mod:`.loss`);
* the privacy unit (:mod:`.units`) and its mechanism (:mod:`.mechanism`): record-level through Opacus'
  ``PrivacyEngine``, user-level through :class:`.mechanism.UserDPOptimizer` on Opacus' noise path;
* the trainable parameters: whatever ``requires_grad`` the method left on (:mod:`.trainable`);
* the noise (:mod:`.noise`): Opacus' Gaussian with multiplier sigma, calibrated to a target (eps, delta)
  by :func:`dpaudit.accounting.calibrate_sigma`, or any noise installed on the optimizer;
* one loop (:mod:`.loop`).

Poisson sampling at q = B / N (records) or B / U (users), noise once per logical batch, the noisy sum
divided by the expected batch size B (Li et al., Alg. 1; Chua et al., Alg. 2). With ``target_epsilon =
inf`` the same loop runs without clipping or noise (shuffled record batches; sampled users). (Over 300 lines:
the record- and user-level entry points share their planning, accounting and white-box set-up here.)
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, astuple, dataclass, field

import torch
from torch import nn

from dpaudit import accounting
from dpaudit.accounting import SubsampledGaussian
from dpaudit.canaries import sampling as canary_sampling
from dpaudit.errors import DpauditError
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import distributed, loop, mechanism, optim
from dpaudit.trainers.clip_stats import ClipStats
from dpaudit.trainers.engine_config import EngineConfig
from dpaudit.trainers.loss import run_choices
from dpaudit.trainers.snapshot import RunParts
from dpaudit.trainers.units import RecordStep, UserStep


@dataclass(kw_only=True)
class TrainResult:
    private: bool
    steps: int
    dataset_size: int
    sample_rate: float
    noise_multiplier: float | None
    delta: float | None
    epsilon: float | None  # epsilon spent, under the config's accountant
    events: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    seconds: float = 0.0
    gradient_canaries: dict | None = None
    clipping: dict | None = None  # trainers/clip_stats.py summary (private runs)
    gradient_canaries_more: list = field(default_factory=list)  # further kinds' sets (gradient_canary_kind 'a+b')
    resumed_at: list = field(default_factory=list)  # logical steps this run was resumed from (trainers/snapshot.py)
    release: bool = False  # a train.secure_rng run: un-noised statistics of the private data stay out of run.json
    sampling: dict | None = None  # canaries at their own rate: {records, canaries, accounted, canary_records, divisor}
    precision_note: str | None = None  # train.autocast not applied as asked, and why (dpaudit.device.bf16_autocast)

    def summary(self) -> dict:
        d = asdict(self)
        d["events"] = [e.to_dict() for e in self.events]
        d.pop("gradient_canaries", None)
        d.pop("gradient_canaries_more", None)
        del d["losses"]
        if self.release and self.private:  # the losses and clipping statistics are not noised: not released
            d["loss_per_step"] = d["final_loss"] = d["final_loss_steps"] = d["clipping"] = None
            d["withheld"] = ("loss_per_step, final_loss and clipping statistics: un-noised functions of the private "
                             "data, left out of a release run (train.secure_rng)")
            return d
        d["loss_per_step"] = [None if math.isnan(x) else round(x, 5) for x in self.losses]  # None: empty batch
        d["final_loss"], d["final_loss_steps"] = final_loss(self.losses)
        return d


def final_loss(losses: list[float]) -> tuple[float | None, int]:
    """(mean training loss over the last tenth of the logical steps, at least one; how many steps that is).
    One number per logical step whatever the physical batching, private or not, so runs compare; steps whose
    Poisson batch was empty (NaN) are skipped."""
    k = max(1, math.ceil(len(losses) / 10))
    tail = [x for x in losses[-k:] if not math.isnan(x)]
    return (float(sum(tail) / len(tail)) if tail else None), k


class _CanarySets(list):
    """The white-box canary sets of a run (one per kind), recorded as the first set plus the others."""

    def to_dict(self) -> dict:
        return self[0].to_dict()

    def more(self) -> list[dict]:
        return [c.to_dict() for c in self[1:]]


def run_identity(cfg: EngineConfig, data) -> str:
    """This training run's identity, which its white-box records and its privacy card share (docs/security.md
    "Evidence is bound to its origin"): a seeded run's is a SHA-256 of its settings, seed, trainable parameters'
    names and shapes and its training data, so two runs of the same settings on the same data are one run (the
    same records, byte for byte); a ``secure_rng`` run's is random."""
    import hashlib
    import json
    import secrets

    if cfg.secure_rng:
        return secrets.token_hex(16)
    h = hashlib.sha256(json.dumps(asdict(cfg), sort_keys=True, default=str).encode())
    _fingerprint(data, h)
    return h.hexdigest()[:32]


def _fingerprint(x, h) -> None:
    if torch.is_tensor(x):
        h.update(f"{x.dtype}{tuple(x.shape)}".encode())
        h.update(x.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(x, dict):
        for k in sorted(x, key=str):
            h.update(str(k).encode())
            _fingerprint(x[k], h)
    elif isinstance(x, (list, tuple)):
        h.update(f"[{len(x)}".encode())
        for v in x:
            _fingerprint(v, h)
    elif hasattr(x, "tensors"):
        _fingerprint(list(x.tensors), h)
    else:
        h.update(repr(x).encode())


def _canaries(cfg: EngineConfig, optimizer, params, q: float, batch: int, private: bool, sharded_module=None,
              identity: str | None = None):
    """White-box gradient canaries, one probe per kind (dpaudit/probe/probe.py, the same code an external loop
    attaches), wired into ``optimizer``: on the trainable coordinates, or (``gradient_canary_coordinates =
    "block"``, private runs) on a block the model never reads, with clip canaries; None when the config asks for
    none. ``sharded_module`` (ghost_fsdp): the ghost-clipping module over the sharded model, from which the probe
    counts records; the canaries go on the block (dpaudit/probe/sharded.py). ``identity``: the run's
    (:func:`run_identity`), from which each probe's run id is derived."""
    if not cfg.gradient_canaries:
        return None
    from dpaudit.probe import Probe

    sets = _CanarySets()
    block = private and cfg.gradient_canary_coordinates == "block"
    for i, kind in enumerate(cfg.canary_kinds):
        sets.append(Probe(optimizer, sample_rate=q, m=cfg.gradient_canaries, kind=kind, seed=cfg.seed + 1000 * i,
                          coordinates="block" if block else "model", clip_canaries=32 if block else 0,
                          params=params if sharded_module is None else None,  # sharded: the optimizer's own
                          model=sharded_module, stream_seed=cfg.seed, expected_batch_size=batch, private=private,
                          clipping_norm=cfg.clipping_norm, record_steps=not (private and cfg.gradient_canary_online),
                          on_fail=None, run_id=None if identity is None else f"{identity}-{kind}"))  # the evaluation judges the record against the card
    return sets


def check_fp32(params, private: bool) -> None:
    """DP steps run in float32: per-sample norms, clipping and noise in half precision would change the mechanism
    the card describes (a norm computed in bf16 can exceed C after clipping)."""
    bad = sorted({str(p.dtype) for p in params if p.dtype != torch.float32})
    if private and bad:
        raise DpauditError(f"DP training needs float32 trainable parameters, got {', '.join(bad)}; load the model in "
                           "float32 (mixed precision is not supported for the DP step)")


def mechanism_seed(cfg: EngineConfig) -> int:
    """The seed of the mechanism's randomness (the noise and the Poisson sampling): ``cfg.seed``, reproducible and
    published in run.json, or with ``secure_rng`` a fresh 62-bit seed from the operating system's entropy that is
    never written anywhere (a report reader cannot regenerate the noise). Opacus' secure_mode noise (the
    floating-point-attack fix) is switched on with it (:func:`secure_noise`)."""
    if cfg.secure_rng:
        import secrets

        return secrets.randbits(62)
    return cfg.seed


def secure_noise(optimizer, cfg: EngineConfig):
    """Opacus' secure_mode Gaussian (2n draws combined: no floating-point reconstruction) for secure runs."""
    if cfg.secure_rng:
        optimizer.secure_mode = True
    return optimizer


def calibrated_sigma(cfg: EngineConfig, delta: float, q: float, steps: int) -> float:
    """The Gaussian noise multiplier that reaches ``cfg.target_epsilon`` at (q, steps, delta) by the run's
    calibrating accountant (the dry run's plan asks the same, trainers/planning.py)."""
    return accounting.calibrate_sigma(cfg.target_epsilon, delta, q, steps, accountant=cfg.accountant)


def card_rate(q: float, canary_rate: float | None) -> float:
    """The rate the card accounts every record at: the larger of the data's q and the canaries' own rate."""
    return q if canary_rate is None else max(q, float(canary_rate))


def _result(cfg, steps, n, q, sigma, delta, losses, t0, canaries, stats, events=None, resumed=None,
            precision_note=None) -> TrainResult:
    """What happened; ``events`` (a custom noise) replace the Gaussian event, and epsilon is then the caller's.
    Over 8 parameters: what one training run did, gathered from train() and train_users(); internal."""
    gc = canaries.to_dict() if canaries is not None else None
    more = canaries.more() if canaries is not None else []
    resumed = list(resumed or [])
    ran = dict(steps=steps, dataset_size=n, sample_rate=q, losses=losses, seconds=time.time() - t0,
               gradient_canaries=gc, gradient_canaries_more=more, resumed_at=resumed)
    if not cfg.private:
        return TrainResult(private=False, noise_multiplier=None, delta=None, epsilon=None,
                           precision_note=precision_note, **ran)
    if events is not None:  # a custom noise: the caller's epsilon
        return TrainResult(private=True, noise_multiplier=None, delta=delta, epsilon=None, events=list(events),
                           clipping=stats.summary(), release=cfg.secure_rng, **ran)
    event = SubsampledGaussian(sample_rate=q, noise_multiplier=sigma, steps=steps, sampler="poisson")
    eps = accounting.compute([event], delta, cfg.accountant).epsilon
    return TrainResult(private=True, noise_multiplier=sigma, delta=delta, epsilon=eps, events=[event],
                       clipping=stats.summary(), release=cfg.secure_rng, **ran)


def _gaussian_ledger(q: float, sigma: float):
    return lambda t: [SubsampledGaussian(sample_rate=q, noise_multiplier=sigma, steps=t, sampler="poisson").to_dict()]


def _resumable(snapshots, parts, steps: int):
    """(first step, losses so far, the after-step hook, the steps resumed from) for a run with ``snapshots``
    (trainers/snapshot.py): the latest snapshot restored into ``parts`` when resuming, one saved every
    ``snapshots.every`` logical steps."""
    if snapshots is None:
        return 0, None, None, []
    loaded = snapshots.load()
    start, losses, resumed = 0, None, []
    if loaded is not None:
        start, losses = parts.restore(*loaded)
        resumed = [*loaded[0].get("resumed_at", []), start]

    def after(done: int, so_far: list[float]) -> None:
        if snapshots.due(done, done >= steps):
            state, tensors = parts.collect(done, so_far)
            snapshots.save(done, {**state, "resumed_at": resumed}, tensors)

    return start, losses, after, resumed


def _canary_flags(records: list[dict], canary_rate: float | None, cfg: EngineConfig, event) -> list[bool] | None:
    """Which records are canaries (marked ``"canary"``) when they have a rate of their own, else None; refused in one
    line where the run cannot honour it."""
    if canary_rate is None or not cfg.private:
        return None  # a non-private run draws shuffled epochs: every record once per epoch
    if isinstance(canary_rate, bool) or not isinstance(canary_rate, (int, float)) or not 0 < canary_rate <= 1:
        raise DpauditError(f"canaries.sample_rate must lie in (0, 1], got {canary_rate!r}")
    why = ("train.gradient_canaries is set (the probe's sampling checks assume one rate for every record)"
           if cfg.gradient_canaries else
           "the model is sharded or trained by torchrun (one rate per record is sampled on one process only)"
           if cfg.grad_sample_mode == "ghost_fsdp" or distributed.world()[1] > 1 else
           "the noise is not the engine's Gaussian" if event is not None else None)
    if why is not None:
        raise DpauditError(f"canaries.sample_rate cannot be honoured: {why}; remove canaries.sample_rate (the "
                           "canaries are then sampled at the data's rate) or that setting")
    return [bool(r.get("canary")) for r in records]


@dataclass(frozen=True)
class RecordPlan:
    """What a record-level run of ``cfg`` on n records will do: expected batch, rate, steps, delta (private)."""

    batch: int
    sample_rate: float
    steps: int
    delta: float | None


def epoch_steps(x: float, cfg: EngineConfig, what: str, exact: bool = False) -> int:
    """Steps of ``x`` epochs' worth (rounded, or up for a private run), refused in one line above
    ``accounting.MAX_STEPS`` before any conversion (an epoch count of 1e308 overflowed ``int``)."""
    if not x <= accounting.MAX_STEPS:
        raise DpauditError(f"train.epochs = {cfg.epochs:g} on {what} is {x:.3g} steps, more than "
                           f"{accounting.MAX_STEPS:.0e}; lower train.epochs")
    return max(1, int(round(x)) if exact else int(math.ceil(x)))


def record_plan(n: int, cfg: EngineConfig) -> RecordPlan:
    """Batch, sampling rate, steps and δ of record-level training on ``n`` records; more steps than
    ``accounting.MAX_STEPS`` (private or not) refused in one line before any work."""
    batch = min(cfg.batch_size, n)
    q = batch / n
    steps = epoch_steps(cfg.epochs * n / batch if not cfg.private else cfg.epochs / q, cfg,
                        f"{n:,} records in batches of {batch}", exact=not cfg.private)
    if not cfg.private:
        return RecordPlan(batch, q, steps, None)
    delta = cfg.delta if cfg.delta is not None else 1.0 / (2 * n)
    return RecordPlan(batch, q, steps, delta)


def users_plan(n_users: int, cfg: EngineConfig) -> RecordPlan:
    """:func:`record_plan` for user-level training on ``n_users`` users: users sampled at B / n_users, ceil(epochs / q)
    steps, delta 1 / (2 n_users) unless given (private). :func:`train_users`, the dry run's plan and the run's
    preflight (trainers/user_dp.py) all read it here."""
    batch = min(cfg.batch_size, n_users)
    q = batch / n_users
    steps = epoch_steps(cfg.epochs / q, cfg, f"{n_users:,} users in batches of {batch}")
    delta = (cfg.delta if cfg.delta is not None else 1.0 / (2 * n_users)) if cfg.private else None
    return RecordPlan(batch, q, steps, delta)


def train(model: nn.Module, records: list[dict], cfg: EngineConfig, pad_id: int, max_len: int, *,
          noise=None, sigma: float | None = None, event=None, snapshots=None,
          canary_rate: float | None = None) -> tuple[nn.Module, TrainResult]:
    """Record-level training of ``model`` on ``records``; returns (the plain model, what happened).
    ``noise`` (:mod:`.noise`) replaces Opacus' Gaussian draw; a non-Gaussian one comes with ``event(sample_rate,
    steps)``, the privacy event of this training under the caller's accounting (the result's epsilon is then
    None); without ``event`` the run is accounted as Gaussian with multiplier sigma. ``sigma``
    fixes the Gaussian noise multiplier instead of calibrating it to ``cfg.target_epsilon`` (a method that
    composes this training with other mechanisms calibrates the whole; the result's epsilon is this training's).
    ``snapshots`` (:class:`.snapshot.Snapshots`) saves the run's state every few steps and resumes from the latest.
    ``canary_rate``: a private run Poisson-samples the records marked ``"canary"`` at this rate and the others at
    q = B / N; the noise is calibrated, and the run accounted, at the larger rate (every record's privacy is that
    of a subsampled Gaussian at its own rate, at most the larger one's), and ``TrainResult.sampling`` records both.
    Over 8 parameters: the model, records, config and tokenisation, then keyword options of the noise and resumption."""
    if event is not None and noise is None:
        raise DpauditError("a privacy event replaces the Gaussian's only with the noise it describes (engine.train("
                           "noise=..., event=...))")
    n = len(records)
    if n == 0:
        raise DpauditError("the training set is empty; check the task data and n_train")
    torch.manual_seed(cfg.seed)
    choices = run_choices(records)
    tensors = data_seam.collate(records, pad_id, max_len)
    params, opt = optim.base(model, cfg.lr, cfg.weight_decay, cfg.head_lr, cfg.optimizer,
                             fused=cfg.grad_sample_mode != "ghost_fsdp")  # FSDP shards the parameters afterwards
    check_fp32(params, cfg.private)
    plan = record_plan(n, cfg)
    batch, q = plan.batch, plan.sample_rate
    model.train()
    t0 = time.time()
    if not cfg.private:
        stream = data_seam.Shuffled(data_seam.shuffled_loader(tensors, batch, cfg.seed, drop_last=True))
        steps = plan.steps
        canaries = _canaries(cfg, opt, params, q, batch, private=False,
                             identity=run_identity(cfg, tensors) if cfg.gradient_canaries else None)
        start, so_far, after, resumed = _resumable(
            snapshots, RunParts(model, opt, {}, {}, canaries, None, lambda t: [], stream), steps)
        step = RecordStep(model, choices=choices, split_cap=cfg.max_physical_batch_size, autocast=cfg.autocast)
        if step.precision_note:  # bf16 asked for on a CPU that only emulates it: float32, said and recorded
            print(f"note: {step.precision_note}", file=sys.stderr)
        losses = loop.run(model, opt, stream, step, steps, desc="train", start=start, losses=so_far, after_step=after)
        return model, _result(cfg, steps, n, q, None, None, losses, t0, canaries, None, resumed=resumed,
                              precision_note=step.precision_note)
    delta, steps = plan.delta, plan.steps
    flags = _canary_flags(records, canary_rate, cfg, event)
    q_card = card_rate(q, None if flags is None else canary_rate)  # what the card accounts
    if event is not None:
        sigma = 0.0  # Opacus' own Gaussian draw is replaced by ``noise``
    elif sigma is None:
        sigma = calibrated_sigma(cfg, delta, q_card, steps)
    elif not sigma > 0:
        raise DpauditError(f"a fixed noise multiplier must be > 0, got {sigma}")
    mseed = mechanism_seed(cfg)
    sharded = placeholder = None
    if cfg.grad_sample_mode == "ghost_fsdp":  # torchrun, the model sharded over the ranks (trainers/fsdp.py)
        from dpaudit.trainers import fsdp

        module, dp_opt, crit, dp_loader, sharded = fsdp.record_level(
            model, opt, tensors, sigma=sigma, clipping_norm=cfg.clipping_norm, expected_batch_size=batch,
            sample_rate=q, seed=mseed)
        placeholder = fsdp.placeholder(tensors)
    elif distributed.world()[1] > 1:  # torchrun: this rank's shard, noise from rank 0 only
        module, dp_opt, crit, dp_loader = distributed.record_level(
            model, opt, tensors, sigma=sigma, clipping_norm=cfg.clipping_norm, expected_batch_size=batch,
            sample_rate=q, grad_sample_mode=cfg.grad_sample_mode, seed=mseed, noise=noise)
    else:
        loader = data_seam.shuffled_loader(tensors, batch, mseed, drop_last=False)
        module, dp_opt, crit, dp_loader = mechanism.record_level(
            model, opt, loader, sigma=sigma, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode,
            seed=mseed, noise=noise)
        if flags is not None:  # the same call a loop written elsewhere makes (dpaudit.api.sample_canaries_at_rate)
            dp_loader = canary_sampling.at_their_rate(dp_loader, flags, canary_rate)
    secure_noise(dp_opt, cfg)
    canaries = _canaries(cfg, dp_opt, params, q, batch, private=True,
                         sharded_module=module if sharded is not None else None,
                         identity=run_identity(cfg, tensors) if cfg.gradient_canaries else None)
    stats = ClipStats(cfg.clipping_norm)
    ledger = (lambda t: [event(q, t).to_dict()]) if event is not None else _gaussian_ledger(q_card, sigma)
    stream = data_seam.Poisson(dp_loader, dp_opt, cfg.max_physical_batch_size)
    start, so_far, after, resumed = _resumable(
        snapshots, RunParts(module, dp_opt, {"noise": dp_opt.generator}, {}, canaries, stats, ledger, stream), steps)
    losses = loop.run(module, dp_opt, stream, RecordStep(module, crit, choices, placeholder=placeholder), steps,
                      stats=stats, desc="DP train", start=start, losses=so_far, after_step=after)
    released = fsdp.release(sharded) if sharded is not None else mechanism.release(module)
    if sharded is not None and canaries is not None and distributed.is_main():  # ranks hold shards: the record's
        for c in canaries:  # fingerprint is taken from the model rank 0 gathered and writes (the check `weights`)
            c.watch_released(released)
    result = _result(cfg, steps, n, q_card, sigma, delta, losses, t0, canaries, stats,
                     [event(q, steps)] if event is not None else None, resumed)
    if flags is not None:
        result.sampling = {**dp_loader.batch_sampler.sampling, "accounted": q_card, "divisor": batch}
    return released, result


def train_users(model: nn.Module, records_by_user: dict[str, list[dict]], cfg: EngineConfig, pad_id: int,
                max_len: int, *, noise=None, snapshots=None, per_step: int | None = None,
                streams: dict[str, list[int]] | None = None) -> tuple[nn.Module, TrainResult]:
    """User-wise DP-SGD (Chua et al., Alg. 2): the privacy unit is the user.

    Users are Poisson-sampled at rate q = B / U (B = ``cfg.batch_size`` expected users); a sampled
    user's gradient is the mean of its records' gradients; it is clipped to C as one unit; the clipped
    user gradients are summed, noise sigma*C is added once, and the sum is divided by B.
    ``target_epsilon = inf`` trains the same loop without clipping or noise (mean over sampled users).
    ``per_step = k``: a sampled user's records (or, with ``streams``, chunks of its concatenated tokens) are
    drawn anew at every step, k of them (Chua et al., Alg. 2; data.UserBatches); else every given record counts.
    Over 8 parameters: the model, users, config and tokenisation, then keyword options of the noise, resumption and per-step draws.
    """
    users = sorted(records_by_user)
    if not users:
        raise DpauditError("no users to train on; check the task data")
    for u in users:
        if not records_by_user[u]:
            raise DpauditError(f"user {u!r} has zero records after selection; drop it or raise the cap")
    if run_choices([r for u in users for r in records_by_user[u]]) is not None:
        raise DpauditError("user-level training scores every position with the LM loss; closed-choice (label-word) "
                           "records are for record-level dp_adam")
    U = len(users)
    torch.manual_seed(cfg.seed)
    B, q, steps, delta = astuple(users_plan(U, cfg))
    sigma = calibrated_sigma(cfg, delta, q, steps) if cfg.private else None
    params, opt = optim.base(model, cfg.lr, cfg.weight_decay, cfg.head_lr, cfg.optimizer)
    check_fp32(params, cfg.private)
    mseed = mechanism_seed(cfg)
    if cfg.private:  # per-record gradients only when they are needed (to clip users)
        module, opt = mechanism.user_level(model, opt, sigma=sigma, clipping_norm=cfg.clipping_norm,
                                           expected_users=B, seed=mseed, noise=noise,
                                           grad_sample_mode=cfg.grad_sample_mode)
        secure_noise(opt, cfg)
    else:
        module = model
    module.train()
    batches = data_seam.UserBatches(records_by_user, pad_id, max_len, q, mseed, per_step=per_step, streams=streams)
    canaries = _canaries(cfg, opt, params, q, B, private=cfg.private,  # extra USERS: one clipped unit each
                         identity=run_identity(cfg, records_by_user) if cfg.gradient_canaries else None)
    stats = ClipStats(cfg.clipping_norm) if cfg.private else None
    t0 = time.time()
    step = UserStep(module, batches, params, cfg.private, cfg.max_physical_batch_size or 64)
    gens = {"noise": opt.generator} if cfg.private else {}
    start, so_far, after, resumed = _resumable(
        snapshots, RunParts(module, opt, gens, {"users": batches.rng, "records": batches.pick}, canaries, stats,
                            _gaussian_ledger(q, sigma) if cfg.private else (lambda t: [])), steps)
    losses = loop.run(module, opt, batches, step, steps, stats=stats,
                      desc="user DP train" if cfg.private else "user train", start=start, losses=so_far,
                      after_step=after)
    for p in params:
        p.grad_sample = None
    return mechanism.release(module), _result(cfg, steps, U, q, sigma, delta, losses, t0, canaries, stats,
                                              resumed=resumed)
