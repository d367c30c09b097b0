"""Honest DP training loops in the shapes people write them, and the bugs the field keeps finding in them: the
conformance suite of the white-box probe (docs/probe.md, reports/probe/conformance.md).

Each loop is written the way a public example writes it (the pattern it follows is named in ``LOOPS``), on a tiny
model and synthetic data so that one run takes about a second on a CPU; the probe is attached in one line after
``make_private`` (``attach_probe(optimizer, sample_rate=..., model=...)``) and saved after training, and the card
is what Opacus' engine did (``card_from_opacus``), or, for a bug that lives in the card, what the team wrote.
:func:`run` trains one loop (honest, or with one bug planted) and returns the probe, the card and the folder the
probe's records were saved in; ``experiments/probe_conformance.py`` judges them with the gate's own rules.

Nothing here is imported by the package: it is test and experiment code (tests/probe/test_probe_conformance.py runs
every loop and bug once on small settings; the table runs them over many seeds).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, LENGTH, WIDTH = 64, 8, 16


@dataclass(frozen=True)
class Loop:
    """One loop pattern: how the user's code is shaped."""

    source: str  # the public pattern it follows
    order: str = "zero-first"  # "zero-first": zero_grad, backward, step; "zero-last": backward, step, zero_grad
    optimizer: str = "sgd"  # sgd | sgd-momentum | adam | adamw
    scheduler: str | None = None  # None | "step" | "cosine"
    clipping: str = "flat"  # flat | per_layer
    mode: str = "hooks"  # hooks | ghost | functorch
    loss_reduction: str = "mean"
    physical: int | None = None  # BatchMemoryManager's max_physical_batch_size
    accumulate: int = 1  # micro-batches per noisy step by Opacus' skip signal (expected batch / accumulate each)
    frozen: bool = False  # the embedding frozen before make_private
    early_stop: float | None = None  # stop after this fraction of the planned steps, the card states the plan
    eval_between: bool = False  # an evaluation pass (no_grad) between steps
    clip_grad_norm: bool = False  # torch.nn.utils.clip_grad_norm_ on p.grad before step (a no-op for Opacus)
    model_kind: str = "tiny"  # tiny | gpt2-lora | gpt2-classifier
    trainer: bool = False  # a Hugging Face Trainer steps the DP optimizer (dp-transformers pattern)
    load_best: bool = False  # the Trainer evaluates and saves every epoch and loads its best checkpoint at the end
    with_epsilon: bool = False  # make_private_with_epsilon instead of make_private(noise_multiplier=...)
    pass_model: bool = True  # attach_probe(..., model=model)
    ddp: bool = False  # DPDDP on 2 gloo ranks (run_distributed)
    wrap_model: bool = True  # False: Opacus 1.6's non-wrapping mode (hooks on the user's own model)
    accelerate: bool = False  # accelerate's Accelerator.prepare around the model, DP optimizer and loader
    functional: str | None = None  # a hand-written DP-SGD step with the functional probe, fed "torch" or "numpy"
    fsdp: bool = False  # FSDP2 on 2 gloo ranks: dpaudit's ghost_fsdp path (Opacus' FSDP optimizer), run_fsdp
    param_groups: bool = False  # two parameter groups: weight decay on the weights, none on biases (HF scripts)
    shuffle: bool = False  # fixed-size batches (make_private(poisson_sampling=False)); card and probe say "shuffle"
    peer: str | None = None  # another library's own trainer, as shipped (an optional extra: PEERS says which)


LOOPS = {
    "opacus-tutorial": Loop("Opacus tutorial (zero_grad, backward, step; SGD)"),
    "pytorch-order": Loop("PyTorch quickstart order (backward, step, zero_grad)", order="zero-last"),
    "adam": Loop("Adam, zero_grad last", order="zero-last", optimizer="adam"),
    "adamw-cosine": Loop("AdamW with weight decay and a cosine schedule (HF scripts)", optimizer="adamw",
                         scheduler="cosine"),
    "sgd-momentum-steplr": Loop("SGD with momentum and StepLR (Opacus CIFAR-10 example)", optimizer="sgd-momentum",
                                scheduler="step"),
    "make-private-with-epsilon": Loop("make_private_with_epsilon (Opacus README)", with_epsilon=True),
    "batch-memory-manager": Loop("BatchMemoryManager virtual steps (Opacus examples)", physical=5),
    "bmm-zero-last": Loop("BatchMemoryManager, zero_grad last", physical=5, order="zero-last"),
    "skip-signal-accumulation": Loop("gradient accumulation by skip signals (dp-transformers)", accumulate=2),
    "per-layer-clipping": Loop("per-layer clipping (clipping='per_layer')", clipping="per_layer"),
    "per-layer-zero-last": Loop("per-layer clipping, zero_grad last", clipping="per_layer", order="zero-last"),
    "ghost-clipping": Loop("ghost clipping (grad_sample_mode='ghost', Opacus 1.5+)", mode="ghost"),
    "ghost-zero-last": Loop("ghost clipping, zero_grad last", mode="ghost", order="zero-last"),
    "functorch": Loop("functorch per-sample gradients (grad_sample_mode='functorch')", mode="functorch"),
    "loss-sum": Loop("loss_reduction='sum'", loss_reduction="sum"),
    "frozen-embedding": Loop("frozen layers (requires_grad=False before make_private)", frozen=True),
    "early-stopping": Loop("early stopping at 60% of the planned steps, card for the plan", early_stop=0.6),
    "eval-between-steps": Loop("a validation pass under no_grad between steps", eval_between=True),
    "clip-grad-norm": Loop("clip_grad_norm_ before step (HF habit; Opacus ignores p.grad)", clip_grad_norm=True),
    "no-model-given": Loop("the probe attached without the model", pass_model=False),
    "gpt2-lora": Loop("LoRA adapters on a tiny GPT-2 (peft)", model_kind="gpt2-lora", optimizer="adamw"),
    "gpt2-classifier-head": Loop("GPT-2 with a classification head", model_kind="gpt2-classifier", optimizer="adam"),
    "hf-trainer": Loop("Hugging Face Trainer stepping Opacus' optimizer (ProbeCallback)", trainer=True,
                       model_kind="gpt2-classifier", optimizer="adam"),
    "ddp": Loop("DPDDP + DistributedDPOptimizer on 2 gloo ranks (Opacus' distributed tutorial)", ddp=True),
    "ddp-noise-every-rank": Loop("DDP with every rank adding its own full noise (more than the card: conservative)",
                                 ddp=True),
    "hf-trainer-load-best": Loop("HF Trainer with load_best_model_at_end (an earlier epoch's checkpoint released)",
                                 trainer=True, model_kind="gpt2-classifier", optimizer="adam", load_best=True),
    "hf-trainer-accumulation": Loop("HF Trainer, gradient accumulation by skip signals (dp-transformers)",
                                    trainer=True, model_kind="gpt2-classifier", optimizer="adam", accumulate=2),
    "non-wrapping": Loop("Opacus 1.6 non-wrapping mode (make_private(wrap_model=False)), zero_grad last",
                         wrap_model=False, order="zero-last"),
    "accelerate": Loop("accelerate: Accelerator.prepare(model, DP optimizer, Poisson loader)", accelerate=True,
                       order="zero-last"),
    "accelerate-non-wrapping": Loop("non-wrapping mode under accelerate, AdamW (Opacus #794)", wrap_model=False,
                                    accelerate=True, optimizer="adamw", order="zero-last"),
    "functional": Loop("hand-written DP-SGD, torch.func per-sample gradients, functional probe (PyTorch tutorial)",
                       functional="torch"),
    "functional-numpy": Loop("hand-written DP-SGD, the probe fed NumPy arrays (a JAX/optax loop's shape)",
                             functional="numpy"),
    "fsdp": Loop("FSDP2 on 2 gloo ranks: Opacus' FSDPOptimizerFastGradientClipping over a tiny Llama (ghost_fsdp)",
                 fsdp=True),
    "param-groups": Loop("AdamW with decay / no-decay parameter groups (Hugging Face run_clm.py)", optimizer="adamw",
                         param_groups=True, order="zero-last"),
    "fixed-size-batches": Loop("fixed-size shuffled batches (poisson_sampling=False), card and probe say so",
                               shuffle=True, order="zero-last"),
    "dp-transformers": Loop("dp-transformers 1.0.0's own OpacusDPTrainer on a tiny GPT-2 LM, its PoissonAuthorSampler "
                            "(ProbeCallback; experiments/dp_transformers_trainer.py)", peer="dp_transformers"),
}
LOOPS["jax-privacy"] = Loop("jax-privacy 2.0's own DP-SGD components with optax, the functional probe's two calls "
                            "(experiments/jax_privacy_loop.py)", peer="jax_privacy", functional="numpy")
# the module each peer loop imports, and the make target of the optional extra that installs it
PEERS = {"dp_transformers": "make test-dp-transformers", "jax_privacy": "make test-jax"}

def loop_of(bug: str) -> str:
    """The loop a bug is planted in: the Opacus tutorial's, the DDP loop for a bug of the ranks, the hand-written
    step (functional probe) for a bug of its mechanism."""
    if bug.startswith("functional-"):
        return "functional"
    if bug.endswith("-fsdp"):
        return "fsdp"
    if bug == "shuffle-larger-batch":
        return "fixed-size-batches"
    if bug.startswith("dp-transformers"):
        return "dp-transformers"
    if bug.endswith("@jax-privacy"):
        return "jax-privacy"
    for adapter in ADAPTED:
        if bug.endswith(f"@{adapter}"):
            return adapter
    return "ddp" if bug.endswith("-rank0") else "opacus-tutorial"


# bug -> (what it is, the mechanism check whose FAIL line must name it)
BUGS = {
    "half-noise": ("add_noise with half the card's sigma", "noise"),
    "no-noise": ("noise left out altogether (p.grad = summed_grad)", "noise"),
    "noise-without-C": ("noise std sigma instead of sigma * C (C = 5)", "noise"),
    "noise-schedule": ("sigma halved after 30% of the steps, the card states one sigma", "noise"),
    "noise-some-tensors": ("no noise on the bias tensors", "noise"),
    "noise-reused": ("the same noise draw added at every step", "noise"),
    "no-clip": ("per-sample clipping bypassed (sum without clip factors)", "clipping"),
    "card-clip-smaller": ("the optimizer clips at 2 C, the card says C", "clipping"),
    "wrong-rate": ("loader at 1 / ceil(N / B), card at B / N", "sampling"),
    "double-rate": ("every batch twice the card's expected size (cf. Opacus #444)", "sampling"),
    "shuffle-as-poisson": ("fixed-size shuffled batches (N mod B != 0) accounted as Poisson", "sampling"),
    "shuffle-as-poisson-even": ("fixed-size shuffled batches (N mod B = 0) accounted as Poisson", "sampling"),
    "batch-growth": ("the batch size doubles after half the steps, the card states one rate", "sampling"),
    "accumulation": ("two micro-batches per noisy step, the card counting each as a step", "sampling"),
    "extra-epochs": ("the card accounts for 2/3 of the steps taken", "steps"),
    "divisor": ("the noisy sum divided by the actual batch size", "divisor"),
    "half-noise-rank0": ("DDP: rank 0 adds half the noise, the others none", "noise"),
    "outside-optimizer": ("the output layer trained by a second, plain optimizer", "coverage"),
    "running-buffer": ("a running mean of the private inputs kept in a buffer", "coverage"),
    "functional-half-noise": ("hand-written step: half the card's sigma", "noise"),
    "functional-noise-some-tensors": ("hand-written step: no noise on the bias tensors", "noise"),
    "functional-no-clip": ("hand-written step: per-record clipping left out (records' norms above C = 0.1)",
                           "clipping"),
    "functional-divisor": ("hand-written step: the noisy sum divided by the actual batch size", "divisor"),
    "functional-double-rate": ("hand-written step: records sampled at twice the card's q", "sampling"),
    "half-noise-fsdp": ("FSDP: every rank's shards get half the card's noise", "noise"),
    "no-noise-other-ranks-fsdp": ("FSDP: only rank 0's shards get their noise, the other rank's none", "noise"),
    "no-clip-fsdp": ("FSDP: the ghost-clipping module clips at 10^6 (records' norms above C = 0.5), the optimizer's "
                     "noise at C", "clipping"),
    "wrong-rate-fsdp": ("FSDP: every rank's loader samples at twice the card's q (the divisor the card's)", "sampling"),
    "shuffle-larger-batch": ("fixed-size batches of 2 B, the card (and probe) stating fixed-size batches of B",
                             "sampling"),
    "other-weights": ("another model's weights (a fresh one of the same shape) saved beside the run's record",
                      "weights"),
}
# the optimizer-side bugs again in the loops whose adapter differs (``bug@loop``): the same DP optimizer, wrapped or
# prepared otherwise
ADAPTED = ("non-wrapping", "accelerate", "hf-trainer", "ddp")
for _adapter in ADAPTED:
    for _bug in ("half-noise", "no-clip", "wrong-rate"):
        BUGS[f"{_bug}@{_adapter}"] = (f"{BUGS[_bug][0]}, in the {_adapter} loop", BUGS[_bug][1])
BUGS["wrong-rate@ddp"] = ("DDP: the loader samples at 30 / 400, the card and the probe state 40 / 400", "sampling")
BUGS["half-noise@ddp"] = ("DDP: rank 0, whose noise is the sum's, adds half the card's sigma", "noise")
# planted in jax-privacy's own components (experiments/jax_privacy_loop.py)
BUGS["half-noise@jax-privacy"] = ("jax-privacy: gaussian_privatizer's stddev half the card's sigma C", "noise")
BUGS["no-clip@jax-privacy"] = ("jax-privacy: clipped_grad with l2_clip_norm = inf (no clipping)", "clipping")
BUGS["wrong-rate@jax-privacy"] = ("jax-privacy: CyclicPoissonSampling at twice the card's q", "sampling")
# a library's own loop as shipped: dp-transformers 1.0.0 draws shuffled fixed-size batches (ShuffledAuthorSampler,
# drop_last) and accounts them as Poisson sampling at q = B / N (its RDP and PRV accountants)
BUGS["dp-transformers-as-shipped"] = ("dp-transformers 1.0.0 as shipped: ShuffledAuthorSampler's fixed-size batches, "
                                      "accounted as Poisson sampling at q = B / N", "sampling")


@dataclass
class Settings:
    records: int = 500
    batch: int = 20
    epochs: int = 8
    sigma: float = 1.0
    clip: float = 1.0
    lr: float = 0.05
    m: int = 200  # probe canaries
    delta: float = 1e-5
    on_fail: str = "warn"
    extra: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.epochs * self.records // self.batch


class Tiny(nn.Module):
    def __init__(self, buffer: bool = False):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.fc1 = nn.Linear(WIDTH, WIDTH)
        self.fc2 = nn.Linear(WIDTH, 2)
        self.track = buffer
        if buffer:
            self.register_buffer("running_mean", torch.zeros(WIDTH))

    def forward(self, x):
        h = self.emb(x).mean(1)
        if self.track and self.training:
            with torch.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * h.mean(0))
        return self.fc2(torch.relu(self.fc1(h)))


def synthetic(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, LENGTH), generator=g)
    y = (x[:, 0] >= VOCAB // 2).long()
    return x, y


def save_weights(model, folder: Path, loop: Loop, bug: str | None) -> None:
    """The trained weights beside the record, as a plain PyTorch user saves them (``safetensors.torch.save_model``
    on the module make_private returned, Opacus' ``_module.`` names and all); bug ``other-weights``: a fresh model
    of the same shape saved instead, the wrong file shipped beside the DP run's record (the check ``weights``)."""
    from safetensors.torch import save_model

    if bug == "other-weights":
        torch.manual_seed(10_007)
        model = build_model(loop, None)
    save_model(model, str(folder / "model.safetensors"))


def build_model(loop: Loop, bug: str | None):
    if loop.model_kind == "tiny":
        return Tiny(buffer=bug == "running-buffer")
    from transformers import GPT2Config, GPT2ForSequenceClassification, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=WIDTH, n_layer=1, n_head=2, num_labels=2,
                     pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False)
    if loop.model_kind == "gpt2-classifier":
        return GPT2ForSequenceClassification(cfg)
    from peft import LoraConfig, get_peft_model

    base = GPT2LMHeadModel(cfg)
    return get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn"], fan_in_fan_out=True,
                                           lora_dropout=0.0))


def logits_of(model, x):
    out = model(x) if isinstance(model, Tiny) or isinstance(getattr(model, "_module", None), Tiny) else None
    if out is not None:
        return out
    pos = torch.arange(x.shape[1]).expand_as(x)  # per sequence: Opacus needs it
    o = model(input_ids=x, position_ids=pos)
    lg = o.logits
    return lg if lg.dim() == 2 else lg[:, -1, :2]


def make_optimizer(loop: Loop, params, lr: float):
    if loop.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr / 10)
    if loop.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=lr / 10, weight_decay=0.01)
    if loop.optimizer == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.SGD(params, lr=lr)


def run(name: str, bug: str | None, seed: int, folder: Path, s: Settings | None = None):
    """Train loop ``name`` with ``bug`` (None: honest) and save the probe's records into ``folder``; returns
    (probe, card, folder). Raises what the loop raises (a crash is a conformance failure)."""
    from opacus import PrivacyEngine

    from dpaudit import api

    s = s or Settings()
    bug = bug.split("@")[0] if bug else bug  # bug@loop: the bug, planted in that loop
    if bug == "noise-without-C":
        s = dataclasses.replace(s, clip=5.0)  # std sigma where sigma C was due: 5x too little
    if bug == "wrong-rate":  # 1 / ceil(N / B) departs from B / N by up to B / N: a large B makes it matter
        s = dataclasses.replace(s, batch=100, records=520)
    loop = LOOPS[name]
    if loop.peer:  # another library's own loop: its runner in experiments/ (PEERS says how it is installed)
        return _PEER_RUNS[loop.peer](bug, seed, folder, s)
    if loop.functional:
        return run_functional(loop, bug, seed, folder, s)
    if distributed(name, bug) is not None:
        return run_distributed([(name, bug, seed, folder)], s)[0]
    torch.manual_seed(seed)
    N = s.records + (7 if bug == "shuffle-as-poisson" else 0)
    x, y = synthetic(N, seed)
    model = build_model(loop, bug)
    if loop.frozen:
        model.emb.weight.requires_grad_(False)
    outside = None
    if bug == "outside-optimizer":
        dp_params = [p for n, p in model.named_parameters() if not n.startswith("fc2")]
        outside = torch.optim.Adam(model.fc2.parameters(), lr=1e-2)
    else:
        dp_params = [p for p in model.parameters() if p.requires_grad]
    if loop.param_groups:  # named as the model names them: decay on weights, none on biases
        names = {id(p): n for n, p in model.named_parameters()}
        dp_params = [{"params": [p for p in dp_params if not names[id(p)].endswith("bias")], "weight_decay": 0.01},
                     {"params": [p for p in dp_params if names[id(p)].endswith("bias")], "weight_decay": 0.0}]
    optimizer = make_optimizer(loop, dp_params, s.lr)
    batch = s.batch
    if bug == "shuffle-as-poisson-even":
        batch = 25  # 500 / 25: every batch exactly B
    if bug == "shuffle-larger-batch":
        batch = 2 * s.batch
    loader = DataLoader(TensorDataset(x, y), batch_size=batch // (2 if bug == "accumulation" else 1), shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    engine = PrivacyEngine(accountant="prv")
    kw = dict(module=model, optimizer=optimizer, data_loader=loader, max_grad_norm=s.clip,
              poisson_sampling=bug not in ("shuffle-as-poisson", "shuffle-as-poisson-even") and not loop.shuffle,
              loss_reduction=loop.loss_reduction, grad_sample_mode=loop.mode)
    if not loop.wrap_model:
        kw["wrap_model"] = False  # make_private returns hooks; the loop keeps using its own model
    if loop.clipping == "per_layer":
        n = len(dp_params)
        kw["max_grad_norm"] = [s.clip / n ** 0.5] * n
        kw["clipping"] = "per_layer"
    if bug == "card-clip-smaller":
        kw["max_grad_norm"] = 2 * s.clip
    criterion = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if loop.with_epsilon:
            out = engine.make_private_with_epsilon(**kw, target_epsilon=8.0, target_delta=s.delta,
                                                   epochs=s.epochs, **({"criterion": nn.CrossEntropyLoss(
                                                       reduction=loop.loss_reduction)} if loop.mode == "ghost" else {}))
        else:
            out = engine.make_private(**kw, noise_multiplier=s.sigma, **({"criterion": nn.CrossEntropyLoss(
                reduction=loop.loss_reduction)} if loop.mode == "ghost" else {}))
    if loop.mode == "ghost":
        model, optimizer, criterion, loader = out
    else:
        wrapped, optimizer, loader = out
        model = wrapped if loop.wrap_model else model
        criterion = nn.CrossEntropyLoss(reduction=loop.loss_reduction)
    q_card = loader.sample_rate if hasattr(loader, "sample_rate") else batch / N
    if bug == "shuffle-larger-batch":
        q_card = s.batch / N  # what the team states: batches of B
    if bug == "wrong-rate":
        q_card = s.batch / N
        loader = _rate_loader(loader, 1.0 / -(-N // s.batch), seed)
    if bug == "double-rate":
        loader = _rate_loader(loader, 2 * q_card, seed)
    if bug == "batch-growth":
        loader = _GrowingLoader(loader, q_card, seed, s.epochs)
    plant(optimizer, bug, s)
    dp_optimizer, dp_loader = optimizer, loader  # what the card is read from (accelerate wraps both)
    if loop.accelerate:
        from accelerate import Accelerator

        model, optimizer, loader = Accelerator(cpu=True).prepare(model, optimizer, loader)
    scheduler = None
    if loop.scheduler == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    elif loop.scheduler == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=s.steps)
    probe_kw = dict(sample_rate=q_card, m=s.m, seed=seed, on_fail=s.on_fail, dataset_size=N,
                    **({"sampler": "shuffle"} if loop.shuffle else {}))
    if loop.pass_model:
        probe_kw["model"] = model
    folder.mkdir(parents=True, exist_ok=True)
    if loop.trainer:
        probe = _train_hf(model, optimizer, loader, loop, s, seed, folder, probe_kw)
    else:
        probe = api.attach_probe(optimizer, **probe_kw)
        _train(model, optimizer, criterion, loader, loop, s, bug, scheduler, outside, probe)
        probe.save(folder)
        save_weights(model, folder, loop, bug)
    card = api.card_from_opacus(engine, dp_loader if hasattr(dp_loader, "sample_rate") or loop.shuffle
                                else _Rated(q_card, N), dp_optimizer, delta=s.delta, method="conformance")
    card = stated_card(card, loop, bug, q_card, N, s, probe)
    return probe, card, folder


def _peer(name: str):
    """The experiments/ module that runs a peer library's own loop (imported by path: experiments/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_dp_transformers(bug: str | None, seed: int, folder: Path, s: Settings):
    """dp-transformers' own trainer (experiments/dp_transformers_trainer.py): honest with its Poisson sampler, as
    shipped (``dp-transformers-as-shipped``) with its default shuffled one; the card is its own accounting's."""
    return _peer("dp_transformers_trainer").run("shuffled" if bug == "dp-transformers-as-shipped" else "poisson", folder, n=s.records, batch=s.batch,
                   epochs=s.epochs, sigma=s.sigma, clip=s.clip, seed=seed, delta=s.delta, m=s.m, on_fail=s.on_fail)


def _run_jax_privacy(bug: str | None, seed: int, folder: Path, s: Settings):
    """jax-privacy's own components with the functional probe (experiments/jax_privacy_loop.py)."""
    return _peer("jax_privacy_loop").run(bug, seed, folder, m=s.m, on_fail=s.on_fail)[:3]


_PEER_RUNS = {"dp_transformers": _run_dp_transformers, "jax_privacy": _run_jax_privacy}  # keys: PEERS'


def run_functional(loop: Loop, bug: str | None, seed: int, folder: Path, s: Settings):
    """A hand-written DP-SGD loop (no Opacus optimizer): Poisson sampling, ``torch.func`` per-record gradients,
    clipping, sum, the probe's ``add_canaries``, Gaussian noise, division by B, the probe's ``observe``, SGD. The
    ``functional-*`` bugs are planted in that hand-written mechanism; the card states what was meant."""
    import numpy as np
    from torch.func import functional_call, grad, vmap

    from dpaudit import api
    from dpaudit.accounting import SubsampledGaussian, compute
    from dpaudit.claim.card import Claim, PrivacyCard

    if bug == "functional-no-clip":
        s = dataclasses.replace(s, clip=0.1)  # clipping matters when records' gradients exceed C
    torch.manual_seed(seed)
    N, T, C = s.records, s.steps, s.clip
    x, y = synthetic(N, seed)
    model = Tiny()
    q = s.batch / N
    q_run = 2 * q if bug == "functional-double-rate" else q
    B = q * N
    probe = api.functional_probe({n: p.shape for n, p in model.named_parameters()}, sample_rate=q, clipping_norm=C,
                                 noise_multiplier=s.sigma, expected_batch_size=B, m=s.m, seed=seed,
                                 on_fail=s.on_fail, dataset_size=N)

    def loss_one(params, xi, yi):
        return F.cross_entropy(functional_call(model, params, (xi.unsqueeze(0),)), yi.unsqueeze(0))

    per_record = vmap(grad(loss_one), in_dims=(None, 0, 0))
    opt = make_optimizer(loop, list(model.parameters()), s.lr)
    noise_gen, sampler = torch.Generator().manual_seed(seed + 1), torch.Generator().manual_seed(seed + 2)
    for _ in range(T):
        idx = torch.nonzero(torch.rand(N, generator=sampler) < q_run).flatten()
        params = {n: p.detach() for n, p in model.named_parameters()}
        if idx.numel():
            g = per_record(params, x[idx], y[idx])
            norms = torch.stack([v.reshape(idx.numel(), -1).norm(dim=1) for v in g.values()]).norm(dim=0)
            factor = torch.ones_like(norms) if bug == "functional-no-clip" else (C / (norms + 1e-6)).clamp(max=1.0)
            total = {n: torch.einsum("i,i...->...", factor, v) for n, v in g.items()}
        else:
            total = {n: torch.zeros_like(p) for n, p in params.items()}
        if loop.functional == "numpy":
            total = {n: v.numpy() for n, v in total.items()}
        total = probe.add_canaries(total, records=int(idx.numel()))
        std = s.sigma * C / (2 if bug == "functional-half-noise" else 1)
        div = max(int(idx.numel()), 1) if bug == "functional-divisor" else B
        update = {}
        for n, v in total.items():
            z = torch.normal(0.0, std, tuple(v.shape), generator=noise_gen)
            if bug == "functional-noise-some-tensors" and n.endswith(".bias"):
                z.zero_()
            update[n] = (v + z.numpy()) / div if isinstance(v, np.ndarray) else (v + z) / div
        probe.observe(update)
        for n, p in model.named_parameters():
            p.grad = torch.as_tensor(update[n], dtype=p.dtype)
        opt.step()
    folder.mkdir(parents=True, exist_ok=True)
    probe.save(folder)
    event = SubsampledGaussian(q, s.sigma, T, "poisson")
    card = PrivacyCard(claim=Claim(epsilon=compute([event], s.delta, "prv").epsilon, delta=s.delta), events=[event],
                       clipping_norm=C, expected_batch_size=B, dataset_size=N, method="conformance-functional")
    return probe, card, folder


def _ranks(rank, world, port, jobs):
    """One spawned rank: the gloo process group once, then each job ``(worker, out, bug, seed, epochs, m)`` in turn
    (every job builds its own model, optimizer, loader and probe from its seed, so a job reads the same whether it
    runs alone or after others), the ranks meeting at a barrier after each."""
    import os
    from datetime import timedelta

    import torch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # a rank that stops early must not leave the other waiting forever: the table records it as a crash
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    torch.set_num_threads(1)
    for worker, out, bug, seed, epochs, m in jobs:
        globals()[worker](rank, world, out, bug, seed, epochs, m)
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _ddp_worker(rank, world, out, bug, seed, epochs, m):
    import torch
    from opacus import PrivacyEngine
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit import api

    torch.manual_seed(seed)
    x, y = synthetic(400, seed)
    model = DPDDP(Tiny())  # rank 0's weights, broadcast
    torch.manual_seed(seed * 1000 + rank)  # each rank its own sampling stream (one seed on all ranks samples in step)
    engine = PrivacyEngine(accountant="prv")
    model, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                                             data_loader=DataLoader(TensorDataset(x, y),  # q = 0.1, or 0.075
                                                                    batch_size=30 if bug == "wrong-rate" else 40),
                                             # (Opacus' distributed Poisson sampler skips a rank's empty batch, which
                                             # leaves the ranks at different steps: at q N / W = 20 an empty one is
                                             # ~1e-9 likely; at 10 it hung 2 of 60 runs here)
                                             noise_multiplier=1.0, max_grad_norm=1.0)
    if bug == "noise-every-rank":  # each rank adds its own full noise: sqrt(world) sigma, more than the card's
        from opacus.optimizers.optimizer import DPOptimizer

        opt.add_noise = lambda: DPOptimizer.add_noise(opt)
    if bug == "no-clip":
        _example().plant_bug(opt, "no-clip")
    if bug in ("half-noise-rank0", "half-noise"):  # Opacus' DDP noise is rank 0's alone: halved there
        from dpaudit import opacus_private as op

        def half():
            for p in opt.params:
                noise = op.generate_noise(0.5 * opt.max_grad_norm, p.summed_grad) if rank == 0 else 0.0
                p.grad = (p.summed_grad + noise).view_as(p)
                op.mark_processed(p.summed_grad)
        opt.add_noise = half
    stated = 0.1 if bug == "wrong-rate" else loader.sample_rate  # the team states B / N = 40 / 400 either way
    probe = api.attach_probe(opt, sample_rate=stated, m=m, seed=seed, model=model, dataset_size=len(x), on_fail=None)
    for _ in range(epochs):
        for xb, yb in loader:
            opt.zero_grad()
            if len(xb):
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
            else:
                (model(xb).sum() * 0).backward()
            opt.step()
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        probe.save(out)
        from safetensors.torch import save_model

        save_model(model, str(out / "model.safetensors"))  # rank 0's copy: every rank holds the same weights
        card = api.card_from_opacus(engine, loader, opt, delta=1e-5)
        if bug == "wrong-rate":  # the card the team wrote: the rate it meant, the steps that ran
            from dataclasses import replace

            from dpaudit.accounting import SubsampledGaussian, compute

            event = SubsampledGaussian(stated, 1.0, probe.steps, "poisson")
            card = replace(card, events=[event], expected_batch_size=stated * len(x),
                           claim=replace(card.claim, epsilon=compute([event], 1e-5, "prv").epsilon))
        card.save(out / "privacy_card.json")


def _fsdp_worker(rank, world, out, bug, seed, epochs, m):
    """dpaudit's ghost_fsdp path (trainers/fsdp.py: FSDP2 + Opacus' FSDP optimizer) on a tiny Llama, the probe on
    every rank with ``model=`` the ghost-clipping module, rank 0 saving; the bugs set the optimizer's noise after the
    probe read the card's sigma."""
    import torch
    from torch.utils.data import TensorDataset
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit import api
    from dpaudit.accounting import SubsampledGaussian, compute
    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.trainers import fsdp
    from dpaudit.trainers.units import RecordStep

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=LENGTH,
                                         tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, pad_token_id=1))
    n, q, C, sigma = 160, 0.1, 0.5, 1.0
    ids = torch.randint(2, VOCAB, (n, LENGTH), generator=torch.Generator().manual_seed(seed))
    data = TensorDataset(ids, torch.ones_like(ids), ids.clone())
    module, opt, crit, loader, _ = fsdp.record_level(model, torch.optim.SGD(model.parameters(), lr=0.1), data,
                                                     sigma=sigma, clipping_norm=C, expected_batch_size=int(q * n),
                                                     sample_rate=2 * q if bug == "wrong-rate-fsdp" else q, seed=seed)
    probe = api.attach_probe(opt, sample_rate=q, m=m, seed=seed, model=module, dataset_size=n, on_fail=None)
    if bug == "no-clip-fsdp":  # the per-sample clip factors are computed by the module, the noise by the optimizer
        module.max_grad_norm = 1e6
    if bug == "half-noise-fsdp":
        opt.noise_multiplier = sigma / 2
    if bug == "no-noise-other-ranks-fsdp" and rank != 0:
        opt.noise_multiplier = 0.0
    step = RecordStep(module, crit, None, placeholder=fsdp.placeholder(data))
    steps = epochs * round(1 / q)
    for _, batch in zip(range(steps), (b for _ in range(epochs) for b in loader)):
        opt.zero_grad()
        step(batch)
        opt.step()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # the model as a user saves an FSDP run: the full state dict gathered on every rank, written by rank 0, and
    # given to the probe so that its record is tied to it (the check `weights`)
    full = get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in full.items()}, str(out / "model.safetensors"))
        probe.save(out, weights=full)
        event = SubsampledGaussian(q, sigma, probe.steps, "poisson")
        PrivacyCard(claim=Claim(epsilon=compute([event], 1e-5, "prv").epsilon, delta=1e-5), events=[event],
                    clipping_norm=C, expected_batch_size=q * n, dataset_size=n,
                    method="conformance-fsdp").save(out / "privacy_card.json")


def distributed(name: str, bug: str | None) -> tuple[str, str | None] | None:
    """(the rank worker, the bug it plants) of a loop that runs on several gloo ranks; None for a one-process loop."""
    loop = LOOPS[name]
    bug = bug.split("@")[0] if bug else bug
    if loop.fsdp:
        return "_fsdp_worker", bug
    if loop.ddp:
        return "_ddp_worker", bug or ("noise-every-rank" if name == "ddp-noise-every-rank" else None)
    return None


def run_distributed(runs: list, s: Settings, world: int = 2) -> list:
    """Runs ``(loop, bug, seed, folder)`` of the DDP and FSDP loops on ``world`` gloo ranks, the probe on every rank,
    rank 0 saving, all in one spawn of the ranks (starting a rank costs about as much as training one of these runs);
    returns what :func:`run` returns for each, the probe's state read back from its saved record. Raises what a rank
    raised (then no run of the batch is read)."""
    import json
    import os
    import socket
    import sys
    from types import SimpleNamespace

    import torch

    from dpaudit.claim.card import load_card

    here = str(Path(__file__).resolve().parent)  # the spawned ranks import this module by name
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    if here not in sys.path:
        sys.path.insert(0, here)
    import probe_loops

    jobs = []
    for name, bug, seed, folder in runs:
        worker, planted = distributed(name, bug)
        jobs.append((worker, folder, planted, seed, s.epochs, s.m))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    torch.multiprocessing.spawn(probe_loops._ranks, args=(world, port, jobs), nprocs=world, join=True)
    out = []
    for _, _, _, folder in runs:
        rec = json.loads((folder / "gradient_canaries.json").read_text())["probe"]
        probe = SimpleNamespace(steps=rec["steps"], online=SimpleNamespace(alarms=rec["online"]["alarms"]))
        out.append((probe, load_card(folder / "privacy_card.json"), folder))
    return out


class _Rated:
    """What card_from_opacus reads of a loader whose rate the team states."""

    def __init__(self, q, n):
        self.sample_rate, self.dataset = q, range(n)


def _rate_loader(loader, q: float, seed: int):
    from opacus.data_loader import DPDataLoader

    dl = DPDataLoader.from_data_loader(DataLoader(loader.dataset, batch_size=max(1, round(q * len(loader.dataset)))),
                                       generator=torch.Generator().manual_seed(seed + 1))
    dl.sample_rate = q
    dl.batch_sampler.sample_rate = q
    return dl


class _GrowingLoader:
    """A Poisson loader whose rate doubles after the first half of the epochs (a curriculum the card omits)."""

    def __init__(self, loader, q, seed, epochs):
        self.first, self.second = loader, _rate_loader(loader, 2 * q, seed)
        self.sample_rate, self.dataset, self.epoch, self.epochs = q, loader.dataset, 0, epochs

    def __iter__(self):
        self.epoch += 1
        return iter(self.first if self.epoch <= self.epochs // 2 else self.second)

    def __len__(self):
        return len(self.first)


def plant(optimizer, bug: str | None, s: Settings) -> None:
    """Optimizer-side bugs, as a team's own DP code has them (the card is written as if they were not)."""
    from dpaudit import opacus_private as op

    if bug in ("half-noise", "no-noise", "noise-without-C", "noise-schedule", "noise-some-tensors", "noise-reused"):
        state = {"calls": 0, "fixed": {}}
        total = s.steps

        def add_noise():
            state["calls"] += 1
            for i, p in enumerate(optimizer.params):
                op.check_processed(p.summed_grad)
                std = optimizer.noise_multiplier * optimizer.max_grad_norm
                if bug == "half-noise" or (bug == "noise-schedule" and state["calls"] > 0.3 * total):
                    std /= 2
                if bug == "noise-without-C":
                    std = optimizer.noise_multiplier
                if bug == "no-noise" or (bug == "noise-some-tensors" and p.dim() == 1):
                    std = 0.0
                noise = op.generate_noise(std, p.summed_grad, optimizer.generator) if std > 0 else 0.0
                if bug == "noise-reused":
                    noise = state["fixed"].setdefault(i, op.generate_noise(std, p.summed_grad, optimizer.generator))
                p.grad = (p.summed_grad + noise).view_as(p)
                op.mark_processed(p.summed_grad)
        optimizer.add_noise = add_noise
    elif bug in ("no-clip", "divisor"):  # the example's own planted bugs (examples/audit_external_opacus.py)
        _example().plant_bug(optimizer, bug)


def _example():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / "audit_external_opacus.py"
    spec = importlib.util.spec_from_file_location("audit_external_opacus", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _train(model, optimizer, criterion, loader, loop: Loop, s: Settings, bug, scheduler, outside, probe) -> None:
    model.train()
    planned = s.steps
    stop_at = int(loop.early_stop * planned) if loop.early_stop else None
    micro = 2 if bug == "accumulation" else loop.accumulate
    noisy = 0
    batches = 0
    xv, _ = synthetic(32, 10_000)

    def one_batch(xb, yb):
        nonlocal batches, noisy
        if loop.order == "zero-first":
            optimizer.zero_grad()
            if outside is not None:
                outside.zero_grad()
                model.zero_grad()  # GradSampleModule's: also the per-sample gradients of the outside layer
        if len(xb):
            criterion(logits_of(model, xb), yb).backward()
        else:  # an empty Poisson batch (or micro-batch): Opacus still needs its (empty) per-sample gradients
            (logits_of(model, xb).sum() * 0).backward()
        if loop.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        batches += 1
        skip = batches % micro != 0
        if skip:
            optimizer.signal_skip_step(True)
        optimizer.step()
        if outside is not None:
            outside.step()
        if not skip:
            noisy += 1
            if scheduler is not None:
                scheduler.step()
            if loop.order == "zero-last":
                optimizer.zero_grad()
                if outside is not None:
                    outside.zero_grad()
                    model.zero_grad()
        if loop.eval_between and not skip:
            model.eval()
            with torch.no_grad():
                logits_of(model, xv)
            model.train()

    for _epoch in range(s.epochs):
        if loop.physical:
            from opacus.utils.batch_memory_manager import BatchMemoryManager

            with BatchMemoryManager(data_loader=loader, max_physical_batch_size=loop.physical,
                                    optimizer=optimizer) as mem:
                for xb, yb in mem:
                    if len(xb) == 0:
                        continue
                    one_batch(xb, yb)
                    if stop_at and probe.steps >= stop_at:
                        return
        else:
            for xb, yb in loader:
                if len(xb) == 0 and micro == 1:
                    continue
                chunks = list(zip(torch.tensor_split(xb, loop.accumulate), torch.tensor_split(yb, loop.accumulate))) \
                    if loop.accumulate > 1 else [(xb, yb)]  # dp-transformers: one Poisson batch, split
                for cx, cy in chunks:
                    one_batch(cx, cy)
                if stop_at and noisy >= stop_at:
                    return


def _train_hf(model, optimizer, loader, loop: Loop, s: Settings, seed: int, folder: Path, probe_kw: dict):
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from dpaudit.probe.hf import ProbeCallback

    class DPTrainer(Trainer):
        def get_train_dataloader(self):
            return self._dp_loader

        def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
            if not len(inputs["x"]):  # an empty Poisson micro-batch
                loss = logits_of(model, inputs["x"]).sum() * 0
            else:
                loss = F.cross_entropy(logits_of(model, inputs["x"]), inputs["y"])
            return (loss, (loss,)) if return_outputs else loss  # the evaluation asks for outputs too

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.optimizer.zero_grad()  # Opacus' zero_grad keeps a skipped step's clipped sum
            return super().training_step(model, inputs, num_items_in_batch)

    class SkipSignal(TrainerCallback):
        """dp-transformers' DPCallback: Opacus clips and sums every micro-batch, noise once per accumulated step."""

        def on_substep_end(self, args, state, control, **kw):
            optimizer.signal_skip_step(do_skip=True)
            optimizer.step()
            optimizer.zero_grad()  # the raw Opacus optimizer's: Accelerate's skips zero_grad while accumulating

        def on_step_end(self, args, state, control, **kw):
            optimizer.zero_grad()  # after the noisy step, clear the clipped sum it used

    class Rows(torch.utils.data.Dataset):
        def __init__(self, ds):
            self.ds = ds

        def __len__(self):
            return len(self.ds)

        def __getitem__(self, i):
            xb, yb = self.ds[i]
            return {"x": xb, "y": yb}

    # load_best: evaluated and saved every epoch, the best checkpoint loaded into the model at the end (by the
    # highest loss, so that it is an earlier epoch's: the released weights are not the last iterate)
    best = dict(eval_strategy="epoch", save_strategy="epoch", save_only_model=True, load_best_model_at_end=True,
                metric_for_best_model="eval_loss", greater_is_better=True, prediction_loss_only=True,
                label_names=["y"]) if loop.load_best else dict(save_strategy="no")
    args = TrainingArguments(output_dir=str(folder / "trainer"), num_train_epochs=s.epochs, max_grad_norm=0.0,
                             learning_rate=s.lr / 10, lr_scheduler_type="constant", report_to=[],
                             logging_strategy="no", remove_unused_columns=False, disable_tqdm=True, use_cpu=True,
                             seed=seed, gradient_accumulation_steps=loop.accumulate, **best)
    kw = {k: v for k, v in probe_kw.items() if k != "model"}
    cb = ProbeCallback(**kw, save_to=folder)
    callbacks = [cb] + ([SkipSignal()] if loop.accumulate > 1 else [])
    evaluation = Rows(torch.utils.data.Subset(loader.dataset, range(64))) if loop.load_best else None
    trainer = DPTrainer(model=model, args=args, train_dataset=Rows(loader.dataset), optimizers=(optimizer, None),
                        callbacks=callbacks, eval_dataset=evaluation)
    trainer._dp_loader = _DictLoader(loader, loop.accumulate)
    trainer.train()
    trainer.save_model(str(folder))  # as a Trainer user saves: model.safetensors beside the callback's record
    return cb.probe


class _DictLoader:
    """Opacus' Poisson batches as the Trainer's dicts; with accumulation, each batch split into k micro-batches (the
    Trainer steps once per k, dp-transformers' callback signals Opacus to skip the others)."""

    def __init__(self, loader, k: int = 1):
        self.loader, self.k = loader, k
        self.dataset = loader.dataset
        self.sample_rate = loader.sample_rate

    def __iter__(self):
        for xb, yb in self.loader:
            for cx, cy in zip(torch.tensor_split(xb, self.k), torch.tensor_split(yb, self.k)):
                yield {"x": cx, "y": cy}

    def __len__(self):
        return len(self.loader) * self.k


def stated_card(card, loop: Loop, bug: str | None, q: float, N: int, s: Settings, probe):
    """The card the team publishes: Opacus' own, or for the card-side bugs and conservative statements, theirs."""
    from dpaudit import accounting
    from dpaudit.accounting import SubsampledGaussian

    e = card.events[-1]
    steps = sum(x.steps for x in card.events)
    sampler = e.sampler
    if loop.early_stop:
        steps = s.steps // loop.accumulate  # the planned steps: over-counted, conservative
    if bug == "accumulation":
        steps = 2 * steps  # every micro-batch counted as a step
    if bug == "extra-epochs":
        steps = (2 * steps) // 3
    if bug in ("shuffle-as-poisson", "shuffle-as-poisson-even"):
        sampler = "poisson"
    sigma = e.noise_multiplier
    clip = card.clipping_norm
    if bug == "card-clip-smaller":
        clip = s.clip
    if (steps, sampler, q, clip) == (sum(x.steps for x in card.events), e.sampler, e.sample_rate, card.clipping_norm):
        return card
    event = SubsampledGaussian(q, sigma, steps, sampler)
    # PRV analyses Poisson sampling only: a fixed-size-batch card keeps the epsilon the team's accountant stated
    eps = accounting.compute([event], card.claim.delta, "prv").epsilon if sampler == "poisson" else card.claim.epsilon
    return dataclasses.replace(card, events=[event], claim=dataclasses.replace(card.claim, epsilon=eps),
                               clipping_norm=clip, expected_batch_size=q * N, dataset_size=N)
