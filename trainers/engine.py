"""The shared DP engine: sample a batch -> per-unit gradients -> clip -> sum -> noise -> step -> account.

Every DP trainer is this loop with three choices (DESIGN.md):

1. privacy unit: ``record`` (one training sequence); user-level units plug in here;
2. trainable parameters: whatever ``requires_grad`` the method left on (all, LoRA adapters, a subset);
3. noise: Gaussian with multiplier sigma (calibrated to a target (eps, delta) by
   :func:`dpaudit.accounting.calibrate_sigma`).

Per-sample gradients, clipping and noise come from Opacus (``hooks`` or ``ghost`` clipping), with
Poisson sampling at rate q = B / N, noise added once per logical batch and the noisy sum divided by
the expected batch size B (Li et al., Alg. 1). With ``target_epsilon = inf`` the same loop runs
without clipping or noise on shuffled batches (the non-private baseline).

Records are dicts with ``input_ids`` and ``targets`` (-100 = position not scored); the loss of a
record is its mean token NLL over scored positions. A record may also list ``choices`` (token ids) and
mark a target ``CHOICE_BASE - k`` (tasks/batching.py): that position is scored by a softmax over the
choices only (label words, Li et al.); all such records of a run share one choice list.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from dpaudit import accounting
from dpaudit.accounting import SubsampledGaussian
from dpaudit.errors import DpauditError
from dpaudit.tasks.batching import CHOICE_BASE
from dpaudit.trainers.clip_stats import ClipStats, module_norms, unit_norms

GRAD_SAMPLE_MODES = ("hooks", "ghost")


@dataclass(frozen=True)
class EngineConfig:
    target_epsilon: float = math.inf  # inf = non-private baseline
    delta: float | None = None  # None = 1 / (2 N), Li et al.'s default
    epochs: float = 1.0
    batch_size: int = 32  # expected (logical) batch size B; q = B / N under Poisson sampling
    lr: float = 1e-3
    head_lr: float | None = None  # a classifier's new head only: its own learning rate (None = lr)
    weight_decay: float = 0.0
    clipping_norm: float = 0.1  # Li et al.'s default C
    accountant: str = "prv"
    grad_sample_mode: str = "hooks"
    seed: int = 0
    max_physical_batch_size: int | None = None  # split logical batches (memory); noise once per logical batch
    gradient_canaries: int = 0  # white-box canaries (trainers/gradient_canaries.py); 0 = none
    gradient_canary_kind: str = "dirac"
    progress: bool = True

    def __post_init__(self):
        e = self.target_epsilon
        if not isinstance(e, (int, float)) or isinstance(e, bool) or not e > 0:
            raise DpauditError(f"train.target_epsilon must be > 0 (inf for non-private), got {e!r}")
        if self.delta is not None:
            accounting.validate_delta(self.delta)
        if not self.epochs > 0:
            raise DpauditError(f"train.epochs must be > 0, got {self.epochs}")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise DpauditError(f"train.batch_size must be an integer >= 1, got {self.batch_size}")
        if not self.lr > 0:
            raise DpauditError(f"train.lr must be > 0, got {self.lr}")
        if self.head_lr is not None and not (isinstance(self.head_lr, (int, float)) and self.head_lr > 0):
            raise DpauditError(f"train.head_lr must be > 0 (or left out to use train.lr), got {self.head_lr!r}")
        if not self.clipping_norm > 0:
            raise DpauditError(f"train.clipping_norm must be > 0, got {self.clipping_norm}")
        if self.accountant not in accounting.ACCOUNTANTS:
            raise DpauditError(f"train.accountant {self.accountant!r} unknown; choose one of "
                               f"{', '.join(accounting.ACCOUNTANTS)}")
        if self.grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise DpauditError(f"train.grad_sample_mode must be one of {GRAD_SAMPLE_MODES}")
        if self.max_physical_batch_size is not None and (not isinstance(self.max_physical_batch_size, int)
                                                         or self.max_physical_batch_size < 1):
            raise DpauditError(f"train.max_physical_batch_size must be an integer >= 1, got {self.max_physical_batch_size!r}")
        if not isinstance(self.gradient_canaries, int) or self.gradient_canaries < 0 or self.gradient_canaries == 1:
            raise DpauditError(f"train.gradient_canaries must be 0 or an integer >= 2, got {self.gradient_canaries!r}")

    @property
    def private(self) -> bool:
        return not math.isinf(self.target_epsilon)


@dataclass
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

    def summary(self) -> dict:
        d = asdict(self)
        d["events"] = [e.to_dict() for e in self.events]
        d.pop("gradient_canaries", None)
        del d["losses"]
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


def run_choices(records: list[dict]) -> torch.Tensor | None:
    """The one choice list shared by the records that have closed-choice targets (None if none do)."""
    lists = {tuple(r["choices"]) for r in records if r.get("choices") is not None}
    if len(lists) > 1:
        raise DpauditError(f"records carry {len(lists)} different choice lists; one run scores one set of label words")
    marked = any(t <= CHOICE_BASE for r in records for t in r["targets"])
    if marked and not lists:
        raise DpauditError("records mark closed-choice targets but list no 'choices'; encode them with the task's "
                           "encode_example")
    if not lists:
        return None
    (choices,) = lists
    if len(choices) < 2 or len(set(choices)) != len(choices):
        raise DpauditError(f"a closed choice needs at least two distinct tokens, got {list(choices)}")
    if any(t <= CHOICE_BASE - len(choices) for r in records for t in r["targets"]):
        raise DpauditError(f"a closed-choice target names a choice beyond the {len(choices)} listed")
    return torch.tensor(choices, dtype=torch.long)


def restrict_to_choices(logits: torch.Tensor, targets: torch.Tensor, choices: torch.Tensor | None):
    """Causal-LM logits and targets with every closed-choice position (target CHOICE_BASE - k) turned into
    a softmax over ``choices``: the logits predicting it get -1e4 on every other token (exp underflows
    to exactly 0 in fp32) and the target becomes ``choices[k]``. Other positions are untouched."""
    flag = targets <= CHOICE_BASE
    if choices is None or logits.dim() == 2 or not bool(flag.any()):
        return logits, targets
    k = (CHOICE_BASE - targets).clamp(0, len(choices) - 1)
    targets = torch.where(flag, choices[k], targets)
    at = torch.zeros_like(flag)
    at[:, :-1] = flag[:, 1:]  # the logits at position p predict the token at p + 1
    bias = torch.full((logits.size(-1),), -1e4, dtype=logits.dtype)
    bias[choices] = 0.0
    return torch.where(at.unsqueeze(-1), logits + bias, logits), targets


def per_sample_loss(logits: torch.Tensor, targets: torch.Tensor, choices: torch.Tensor | None = None) -> torch.Tensor:
    """Mean next-token NLL over each sequence's scored positions, shape (B,); closed-choice positions
    are scored over ``choices`` only; for a classifier (logits (B, labels)) the cross-entropy of the
    label kept in ``targets[:, 0]``."""
    if logits.dim() == 2:
        return nn.functional.cross_entropy(logits.float(), targets[:, 0], reduction="none")
    logits, targets = restrict_to_choices(logits, targets, choices)
    lg = logits[:, :-1].float()
    tg = targets[:, 1:]
    nll = nn.functional.cross_entropy(lg.reshape(-1, lg.size(-1)), tg.reshape(-1), ignore_index=-100,
                                      reduction="none").view(tg.shape)
    valid = (tg != -100).sum(1).clamp(min=1)
    return nll.sum(1) / valid


def _forward(model, ids, mask):
    pos = torch.arange(ids.size(1)).unsqueeze(0).repeat(ids.size(0), 1)  # per-example, contiguous
    return model(input_ids=ids, attention_mask=mask, position_ids=pos).logits


def is_head(name: str) -> bool:
    """A classifier's new head (plain ``classifier.*`` or peft's ``...classifier.modules_to_save...``)."""
    return name.startswith("classifier.") or ".classifier." in name


def adam(model: nn.Module, cfg: EngineConfig) -> tuple[list, torch.optim.Adam]:
    """(trainable parameters, Adam over them); the head gets ``cfg.head_lr`` when it is set."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise DpauditError("no trainable parameters; check the trainable-parameter choice")
    params = [p for _, p in named]
    if cfg.head_lr is None:
        return params, torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    head = [p for n, p in named if is_head(n)]
    if not head:
        raise DpauditError("train.head_lr is set but the model has no trainable classifier head; remove head_lr "
                           "or use a classifier model (minilm-l6, tiny-bert)")
    body = [p for n, p in named if not is_head(n)]
    groups = ([{"params": body}] if body else []) + [{"params": head, "lr": cfg.head_lr}]
    return params, torch.optim.Adam(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)


def train(model: nn.Module, records: list[dict], cfg: EngineConfig, pad_id: int, max_len: int) -> tuple[nn.Module, TrainResult]:
    """Train ``model`` in place on ``records``; returns (the plain model, what happened)."""
    n = len(records)
    if n == 0:
        raise DpauditError("the training set is empty; check the task data and n_train")
    torch.manual_seed(cfg.seed)
    choices = run_choices(records)
    data = collate(records, pad_id, max_len)
    params, opt = adam(model, cfg)
    gen = torch.Generator().manual_seed(cfg.seed)
    batch = min(cfg.batch_size, n)
    q = batch / n
    model.train()
    t0 = time.time()
    if not cfg.private:
        loader = DataLoader(data, batch_size=batch, shuffle=True, drop_last=True, generator=gen)
        steps = max(1, int(round(cfg.epochs * n / batch)))
        canaries = _gradient_canaries(cfg, opt, params, q, batch, private=False)
        losses = _loop(model, opt, loader, steps, cfg, criterion=None, private=False, choices=choices)
        return model, TrainResult(False, steps, n, q, None, None, None, [], losses, time.time() - t0,
                                  canaries.to_dict() if canaries else None)

    delta = cfg.delta if cfg.delta is not None else 1.0 / (2 * n)
    steps = max(1, int(math.ceil(cfg.epochs / q)))
    sigma = accounting.calibrate_sigma(cfg.target_epsilon, delta, q, steps, accountant=cfg.accountant)
    loader = DataLoader(data, batch_size=batch, shuffle=True, generator=gen)
    gsm, dp_opt, dp_crit, dp_loader = make_private(model, opt, loader, cfg, sigma)
    canaries = _gradient_canaries(cfg, dp_opt, params, q, batch, private=True)
    stats = ClipStats(cfg.clipping_norm)
    losses = _loop(gsm, dp_opt, dp_loader, steps, cfg, criterion=dp_crit, private=True, choices=choices, stats=stats)
    event = SubsampledGaussian(sample_rate=q, noise_multiplier=sigma, steps=steps, sampler="poisson")
    eps = accounting.compute([event], delta, cfg.accountant).epsilon
    if hasattr(gsm, "remove_hooks"):  # leave a plain module behind for save_pretrained
        gsm.remove_hooks()
    plain = gsm._module
    return plain, TrainResult(True, steps, n, q, sigma, delta, eps, [event], losses, time.time() - t0,
                              canaries.to_dict() if canaries else None, stats.summary())


def _gradient_canaries(cfg: EngineConfig, opt, params, q: float, batch: int, private: bool):
    if not cfg.gradient_canaries:
        return None
    from dpaudit.trainers.gradient_canaries import GradientCanaries

    gc = GradientCanaries.plan(cfg.gradient_canaries, cfg.gradient_canary_kind, cfg.seed, params, cfg.clipping_norm, q)
    gc.attach(opt, params, batch, cfg.seed, private=private)
    return gc


def make_private(model, opt, loader, cfg: EngineConfig, sigma: float):
    """Opacus wrapping: Poisson sampling at B/N, per-sample clipping at C, Gaussian noise sigma*C,
    sum divided by the expected batch size. Returns (module, optimizer, criterion or None, loader)."""
    from opacus import PrivacyEngine

    engine = PrivacyEngine(accountant="prv", secure_mode=False)  # our accounting is separate (dpaudit.accounting)
    noise_gen = torch.Generator().manual_seed(cfg.seed + 1)
    crit = nn.CrossEntropyLoss(ignore_index=-100, reduction="mean")
    out = engine.make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=sigma,
                              max_grad_norm=cfg.clipping_norm, poisson_sampling=True, loss_reduction="mean",
                              grad_sample_mode=cfg.grad_sample_mode, criterion=crit, noise_generator=noise_gen)
    if cfg.grad_sample_mode == "ghost":
        return out
    gsm, dp_opt, dp_loader = out
    return gsm, dp_opt, None, dp_loader


def step_loss(model, ids, mask, tgt, criterion=None, choices: torch.Tensor | None = None):
    """The loss whose backward gives each record's gradient of its mean token NLL (hooks or ghost)."""
    width = int(mask.sum(1).max())  # trim the batch's common padding (same loss, less work)
    ids, mask, tgt = (t[:, :width].contiguous() for t in (ids, mask, tgt))  # ghost needs contiguous
    logits = _forward(model, ids, mask)
    if criterion is not None and logits.dim() == 2:  # ghost clipping, classifier: one label per record
        return criterion(logits, tgt[:, 0])
    if criterion is not None:  # ghost clipping: Opacus' per-sequence wrapper computes the same loss
        logits, tgt = restrict_to_choices(logits, tgt, choices)
        return criterion(logits[:, :-1].reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1),
                         shape=(ids.size(0), ids.size(1) - 1))
    return per_sample_loss(logits, tgt, choices).mean()


def _batches(loader, opt, cfg: EngineConfig, private: bool):
    """Endless stream of physical batches. With a physical cap, DP batches go through Opacus'
    BatchMemoryManager, which makes the optimizer accumulate clipped gradients and add the noise once
    per logical (Poisson) batch; non-private batches are split and accumulated here."""
    cap = cfg.max_physical_batch_size
    while True:
        if private and cap:
            from opacus.utils.batch_memory_manager import BatchMemoryManager

            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=cap, optimizer=opt) as mem:
                yield from mem
        else:
            yield from loader


def _loop(model, opt, loader, steps: int, cfg: EngineConfig, criterion, private: bool,
          choices: torch.Tensor | None = None, stats: ClipStats | None = None) -> list[float]:
    """Run ``steps`` logical steps; returns one loss per logical step (the mean over its records; NaN for an
    empty Poisson batch). ``stats`` (private runs) records the per-sample gradient norms of each logical step
    before Opacus clips them."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    losses: list[float] = []
    part_sum, part_n = 0.0, 0  # a DP logical batch's physical parts, until Opacus takes the noisy step
    bar = tqdm(total=steps, desc="DP train" if private else "train", disable=not cfg.progress, leave=False)
    done = 0
    cap = cfg.max_physical_batch_size
    for ids, mask, tgt in _batches(loader, opt, cfg, private):
        if done >= steps:
            break
        opt.zero_grad(set_to_none=True)
        if ids.size(0) == 0:  # Poisson may draw an empty batch: the noisy step still happens
            _noise_only_step(model, opt)
        elif private or not cap or ids.size(0) <= cap:
            loss = step_loss(model, ids, mask, tgt, criterion, choices)
            loss.backward()
            if stats is not None:
                stats.observe(module_norms(model, trainable))
            opt.step()
            part_sum, part_n = part_sum + float(loss.detach()) * ids.size(0), part_n + ids.size(0)
        else:  # non-private gradient accumulation: mean over the logical batch, one optimizer step
            total = 0.0
            for k in range(0, ids.size(0), cap):
                part = [t[k:k + cap] for t in (ids, mask, tgt)]
                loss = step_loss(model, *part, criterion, choices) * part[0].size(0) / ids.size(0)
                loss.backward()
                total += float(loss.detach())
            opt.step()
            part_sum, part_n = total * ids.size(0), ids.size(0)
        if private and getattr(opt, "_is_last_step_skipped", False):
            continue  # a physical part of a logical batch: no noise, no step yet
        losses.append(part_sum / part_n if part_n else float("nan"))
        part_sum, part_n = 0.0, 0
        if stats is not None:
            stats.end_step()
        done += 1
        bar.update(1)
        if losses and done % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    bar.close()
    return losses


def _noise_only_step(model, opt) -> None:
    for p in model.parameters():
        if p.requires_grad:
            p.grad_sample = torch.zeros((0, *p.shape))
    opt.step()


def user_gradients(gsm, params, data: dict, sampled: list[str], chunk: int = 64):
    """Per-user gradients (mean over each user's records), shape (n_users, *p.shape) per parameter,
    from Opacus per-record gradients aggregated by owner; and the mean of the users' mean losses."""
    user_grads = [torch.zeros((len(sampled), *p.shape)) for p in params]
    if not sampled:
        return user_grads, 0.0
    ids = torch.cat([data[u][0] for u in sampled])
    mask = torch.cat([data[u][1] for u in sampled])
    tgt = torch.cat([data[u][2] for u in sampled])
    owner = torch.cat([torch.full((data[u][0].size(0),), j) for j, u in enumerate(sampled)])
    weight = torch.cat([torch.full((data[u][0].size(0),), 1.0 / data[u][0].size(0)) for u in sampled])
    total = 0.0
    for s in range(0, ids.size(0), chunk):
        sl = slice(s, s + chunk)
        width = int(mask[sl].sum(1).max())
        part = [t[sl, :width].contiguous() for t in (ids, mask, tgt)]
        loss = (per_sample_loss(_forward(gsm, part[0], part[1]), part[2]) * weight[sl]).sum()
        loss.backward()  # record r's grad_sample = w_r * its gradient (loss_reduction="sum")
        total += float(loss.detach())
        for G, p in zip(user_grads, params):
            G.index_add_(0, owner[sl], p.grad_sample)
            p.grad_sample = None
        for p in params:
            p.grad = None
    return user_grads, total / len(sampled)


def _users_mean_loss_backward(model, data: dict, sampled: list[str], chunk: int) -> float:
    """Non-private: backward of the mean over sampled users of each user's mean record loss (the same
    gradient as averaging the unclipped user gradients), with plain autograd."""
    if not sampled:
        return 0.0
    ids = torch.cat([data[u][0] for u in sampled])
    mask = torch.cat([data[u][1] for u in sampled])
    tgt = torch.cat([data[u][2] for u in sampled])
    weight = torch.cat([torch.full((data[u][0].size(0),), 1.0 / (data[u][0].size(0) * len(sampled))) for u in sampled])
    total = 0.0
    for s in range(0, ids.size(0), chunk):
        sl = slice(s, s + chunk)
        width = int(mask[sl].sum(1).max())
        part = [t[sl, :width].contiguous() for t in (ids, mask, tgt)]
        loss = (per_sample_loss(_forward(model, part[0], part[1]), part[2]) * weight[sl]).sum()
        loss.backward()
        total += float(loss.detach())
    return total


def clip_users(user_grads: list[torch.Tensor], C: float, stats: ClipStats | None = None) -> list[torch.Tensor]:
    """Clip each user's whole gradient (all parameters together) to norm C and sum over users."""
    norms = unit_norms(user_grads)
    if stats is not None:
        stats.observe(norms)
    factor = (C / (norms + 1e-6)).clamp(max=1.0)
    return [(G * factor.view(-1, *([1] * (G.dim() - 1)))).sum(0) for G in user_grads]


def train_users(model: nn.Module, records_by_user: dict[str, list[dict]], cfg: EngineConfig, pad_id: int,
                max_len: int) -> tuple[nn.Module, TrainResult]:
    """User-wise DP-SGD (Chua et al., Alg. 2): the privacy unit is the user.

    Users are Poisson-sampled at rate q = B / U (B = ``cfg.batch_size`` expected users); a sampled
    user's gradient is the mean of its records' gradients; it is clipped to C as one unit; the clipped
    user gradients are summed, Gaussian noise sigma*C is added once, and the sum is divided by B.
    Per-record gradients come from Opacus' GradSampleModule; the per-user aggregation and clipping,
    which Opacus lacks, are here. ``target_epsilon = inf`` trains the same loop without clipping/noise.
    """
    from opacus import GradSampleModule

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
    B = min(cfg.batch_size, U)
    q = B / U
    private = cfg.private
    steps = max(1, int(math.ceil(cfg.epochs / q)))
    delta = (cfg.delta if cfg.delta is not None else 1.0 / (2 * U)) if private else None
    sigma = accounting.calibrate_sigma(cfg.target_epsilon, delta, q, steps, accountant=cfg.accountant) if private else 0.0
    params, opt = adam(model, cfg)
    # per-record gradients only when they are needed (to clip users); the non-private baseline is plain autograd
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum") if private else model
    gsm.train()
    rng = np.random.default_rng([cfg.seed, 5150])
    noise_gen = torch.Generator().manual_seed(cfg.seed + 1)
    data = {u: collate(records_by_user[u], pad_id, max_len).tensors for u in users}
    chunk = cfg.max_physical_batch_size or 64
    canaries = None
    stats = ClipStats(cfg.clipping_norm)
    if cfg.gradient_canaries:  # white-box canaries as extra USERS: one clipped unit each, sampled at the users' q
        from dpaudit.trainers.gradient_canaries import GradientCanaries

        canaries = GradientCanaries.plan(cfg.gradient_canaries, cfg.gradient_canary_kind, cfg.seed, params,
                                         cfg.clipping_norm, q)
        canaries.start(cfg.seed)
    losses: list[float] = []
    t0 = time.time()
    bar = tqdm(total=steps, desc="user DP train" if private else "user train", disable=not cfg.progress, leave=False)
    for _ in range(steps):
        sampled = [users[i] for i in np.flatnonzero(rng.random(U) < q)]
        opt.zero_grad(set_to_none=True)
        if not private:
            total_loss = _users_mean_loss_backward(gsm, data, sampled, chunk)
            if canaries is not None:
                canaries.inject(lambda k: params[k].grad, 1.0 / B)
                canaries.score(lambda k: params[k].grad, B)
            opt.step()
            losses.append(total_loss if sampled else float("nan"))  # NaN: no user sampled
            bar.update(1)
            continue
        user_grads, total_loss = user_gradients(gsm, params, data, sampled, chunk)
        if private:
            summed = clip_users(user_grads, cfg.clipping_norm, stats)
            stats.end_step()
            if canaries is not None:
                canaries.inject(summed.__getitem__)
            for g, p in zip(summed, params):
                noise = torch.normal(0.0, sigma * cfg.clipping_norm, size=p.shape, generator=noise_gen)
                p.grad = (g + noise) / B
            if canaries is not None:
                canaries.score(lambda k: params[k].grad, B)
        else:
            for G, p in zip(user_grads, params):
                p.grad = G.sum(0) / max(1, len(sampled))
        opt.step()
        losses.append(total_loss if sampled else float("nan"))  # NaN: no user sampled
        bar.update(1)
    bar.close()
    for p in params:
        p.grad_sample = None
    if hasattr(gsm, "remove_hooks"):
        gsm.remove_hooks()
    plain = gsm._module if private else gsm
    gc = canaries.to_dict() if canaries is not None else None
    if not private:
        return plain, TrainResult(False, steps, U, q, None, None, None, [], losses, time.time() - t0, gc)
    event = SubsampledGaussian(sample_rate=q, noise_multiplier=sigma, steps=steps, sampler="poisson")
    eps = accounting.compute([event], delta, cfg.accountant).epsilon
    return plain, TrainResult(True, steps, U, q, sigma, delta, eps, [event], losses, time.time() - t0, gc,
                              stats.summary())
