"""``dpaudit run CONFIG --dry-run``: what every variant would do, before any training.

The config is validated as a run would validate it; the data and the canaries are read (when the data source
is not on this machine, ``task.n_train`` stands in for its size, said so); then, per variant, the mechanism is
resolved exactly as the trainer will resolve it, by the method itself (its registry entry's ``plan``,
trainers/planning.py): the sampling rate q and divisor B, the number of noisy steps, δ, the noise (σ calibrated
to the target by the method's calibrating accountant; DP-FROST's two phases; LMO-DP's search) and the ε the card
will claim. The model is built on PyTorch's ``meta`` device from its config alone (no
weights are read or needed) to count its parameters, the trainable ones (LoRA included) and a memory estimate
per device for the chosen clipping mode (float32: weights, gradients, Adam's two moments, and per-sample
gradients of the physical batch in hooks mode; activations are not estimated).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from dpaudit import options
from dpaudit.canaries import manifest as canaries
from dpaudit.errors import DpauditError
from dpaudit.markup import probability
from dpaudit.run import config


@dataclass(frozen=True)
class VariantPlan:
    name: str
    method: str
    unit: str
    units: int  # records (or users) the mechanism samples from
    batch: int  # expected batch B (the divisor)
    sample_rate: float | None
    steps: int
    delta: float | None
    noise: str  # what noise, e.g. "σ = 0.97 (prv)"
    claim: float | None  # the ε the card will claim (None: non-private)
    params: int
    trainable: int
    memory_gb: float
    memory_note: str


def plan(cfg_path: Path, only: tuple[str, ...] = ()) -> tuple[list[VariantPlan], list[str]]:
    """(one plan per variant, notes)."""
    from dpaudit.tasks import registry

    cfg = config.load(cfg_path, only)
    notes: list[str] = []
    try:
        data = registry.load_data(dataclasses.asdict(cfg.task))
        n_data = len(data.train)
        users = len(data.by_user()) if hasattr(data, "by_user") else None
    except DpauditError as e:
        if Path(cfg.task.source).expanduser().exists():  # the data is there and bad: the error a run would give
            raise
        if cfg.task.name == "table2text":  # its records are references, several per meaning representation
            raise DpauditError(f"--dry-run: the table-to-text data must be present to count its references ({e})") \
                from None
        if not cfg.task.n_train:
            raise DpauditError(f"--dry-run: the data cannot be read ({e}); set task.n_train to plan without it") from None
        data, n_data = None, cfg.task.n_train
        users = n_data if cfg.task.name == "userlm" else None
        notes.append(f"the data was not read ({e}); its size is task.n_train = {n_data}"
                     + (" users" if users else ""))
    manifest = canaries.generate(cfg.canaries) if cfg.canaries.resolved else None
    inserted = (len(manifest.training_texts()) if manifest is not None
                else int(round(cfg.canaries.m / 2)) * cfg.canaries.repetitions * cfg.canaries.records_per_user)
    if manifest is None:
        notes.append(f"design {cfg.canaries.design!r} chooses its pool from the model at run time: about {inserted} "
                     "canary records expected")
    model_params = _params(cfg)
    out = []
    for v in cfg.variants:
        n = n_data + inserted
        if v.trainer.method == "group_privacy":  # each user's records capped at k (canary users too)
            k = v.trainer.user_cap
            c = cfg.canaries
            padded = v.trainer.user_sampling == "paper"  # users with fewer than k resampled up to k (Alg. 1)

            def kept(n_user: int, k: int = k, padded: bool = padded) -> int:
                return k if padded else min(n_user, k)
            canary = (sum(kept(len(t)) for t in manifest.training_users().values()) if manifest is not None
                      else int(round(c.m / 2)) * kept(c.records_per_user * c.repetitions))
            if data is not None:
                n = sum(kept(len(r)) for r in data.by_user().values()) + canary
            else:
                n = (users or 0) * k + canary
                notes.append(f"{v.name}: at most {n:,} records (every user capped at k = {k}; their counts are in "
                             "the data)")
        if v.trainer.engine.grad_sample_mode == "ghost_fsdp":  # what the sharded run refuses, refused here too
            from dpaudit.trainers import distributed

            distributed.check_fsdp_variant(v.name, v.trainer)
        _canary_rate(cfg, v)  # a method that cannot honour canaries.sample_rate is refused as the run refuses it
        if data is not None and manifest is not None:  # what the run refuses before its first variant, refused here
            from dpaudit.trainers import methods

            methods.preflight(cfg, v, data, manifest, n)
        out.append(_variant(cfg, v, n, users, manifest, model_params))
        notes += _precision(v)
    return out, notes


def _precision(v) -> list[str]:
    """What the run will say of train.autocast on this machine (dpaudit.device.bf16_autocast): bf16 asked for on a
    CPU that only emulates it trains in float32, and a GPU without bf16 is refused, here as in the run."""
    from dpaudit import device

    eng = v.trainer.engine
    if eng.autocast != "bf16":
        return []
    try:
        where = device.resolve(eng.device, f"{v.name}: train.device")
    except DpauditError:  # CUDA named on a machine without: the plan is for the machine that will run it
        return []
    return [f"{v.name}: {why}" for why in [device.bf16_autocast(where, eng.autocast)[1]] if why]


def _variant(cfg, v, n_records: int, users: int | None, manifest, model_params) -> VariantPlan:
    """One variant's plan: the method's own answer (``trainers.methods.Method.mechanism_plan``: no branch per
    method here), the model's parameters and a memory estimate."""
    from dpaudit.trainers import methods

    tc = v.trainer
    total, trainable = model_params(tc)
    mp = methods.get(tc.method).mechanism_plan(cfg, v, n_records, users, manifest)
    return VariantPlan(v.name, tc.method, mp.unit, mp.units, mp.batch, mp.sample_rate, mp.steps, mp.delta, mp.noise,
                       mp.claim, total, trainable, *_memory(total, trainable, mp.memory_engine or tc.engine, tc))


def _canary_rate(cfg, v) -> None:
    """A method that cannot honour the canaries' own sampling rate is refused as the run refuses it."""
    from dpaudit.trainers import methods

    methods.check_canary_rate(v, cfg.canaries.sample_rate)


def _params(cfg):
    """A function of the trainer config giving (parameters, trainable parameters) of the model built from its
    config alone on the meta device (the bundled MiniLM and tiny BERT, whose weights ship with dpaudit, as they
    are)."""
    from dpaudit.trainers import trainable as trainable_axis

    def count(tc):
        model = _meta_model(cfg.model)
        trainable_axis.prepare_tied(model, tc.tied_embeddings, tc.engine.grad_sample_mode, tc.trainable)
        model, _ = trainable_axis.apply(model, tc.trainable, tc.lora_r, tc.lora_alpha, tc.lora_targets)
        if tc.engine.grad_sample_mode == "ghost_fsdp" and tc.engine.private:  # layers FSDP cannot clip per sample
            from dpaudit.trainers import fsdp

            fsdp.check_layers(model)
        total = sum(p.numel() for p in model.parameters())
        return total, sum(p.numel() for p in model.parameters() if p.requires_grad)

    return count


def _meta_model(spec):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    from dpaudit.tasks import assets, models

    if spec.name in ("minilm-l6", "tiny-bert"):
        return models.build(spec)[0]
    if spec.name == "tiny-gpt2":  # the architecture; pre-trained weights (pretrain_steps) are not needed to count
        with torch.device("meta"):
            return models.build(dataclasses.replace(spec, pretrain_steps=0))[0]
    if spec.name == "local":
        path = Path(spec.path).expanduser()
        if not path.is_dir():
            raise DpauditError(f"--dry-run needs the model's config.json: {spec.path} is not a local folder")
        models.refuse_code(path)  # what the run refuses before loading, refused here too
        if not list(path.glob("*.safetensors")) and not (path / "adapter_config.json").is_file():
            raise DpauditError(f"{path} has no .safetensors weights (dpaudit never unpickles .bin/.pt files, which "
                               "can run code); convert them with save_pretrained(..., safe_serialization=True)")
    else:  # smollm2-135m: the safetensors cache's config, else SmolLM2-135M's architecture (its GGUF metadata)
        path = assets.cache_dir() / "smollm2-135m"
    if (path / "config.json").is_file():
        mcfg = AutoConfig.from_pretrained(path, trust_remote_code=False)
    else:
        mcfg = models.smollm2_architecture()
    with torch.device("meta"):
        if spec.kind == "causal":
            return AutoModelForCausalLM.from_config(mcfg)
        mcfg.num_labels = models.N_LABELS
        return AutoModelForSequenceClassification.from_config(mcfg)


def _memory(total: int, trainable: int, eng, tc) -> tuple[float, str]:
    b = eng.max_physical_batch_size or eng.batch_size
    per_sample = 4 * trainable * b if eng.private and eng.grad_sample_mode == "hooks" else 0
    ghost = 4 * trainable if eng.private and eng.grad_sample_mode in options.GHOST_MODES else 0
    state, opt = (8 * trainable, "Adam") if eng.optimizer == "adam" else (0, "SGD (no state)")
    gb = (4 * total + 4 * trainable + state + per_sample + ghost) / 2 ** 30
    how = (f"weights + grads + {opt} + per-sample grads of {b} examples (hooks)" if per_sample else
           f"weights + grads + {opt} + one clipped sum ({'book-keeping' if eng.grad_sample_mode == 'bk' else 'ghost'})"
           if ghost else f"weights + grads + {opt}")
    if eng.grad_sample_mode == "ghost_fsdp":  # every tensor above sharded over the torchrun ranks
        import os

        w = max(1, int(os.environ.get("WORLD_SIZE", "1")))
        gb, how = gb / w, how + (f", sharded over {w} ranks" if w > 1 else ", divided by the number of torchrun ranks")
    return gb, how + "; activations not included"


def render(plans: list[VariantPlan], notes: list[str]) -> str:
    lines = ["| variant | method | unit | sampled from | B | q | steps | δ | noise | claimed ε | parameters "
             "(trainable) | memory per device (estimate) |", "|" + "---|" * 12]
    for p in plans:
        lines.append(f"| {p.name} | {p.method} | {p.unit} | {p.units:,} | {p.batch} | "
                     f"{'—' if p.sample_rate is None else f'{p.sample_rate:.4g}'} | {p.steps:,} | "
                     f"{'—' if p.delta is None else f'{probability(p.delta, 3)}'} | {p.noise} | "
                     f"{'∞ (no claim)' if p.claim is None else f'{p.claim:.4g}'} | {p.params:,} ({p.trainable:,}) | "
                     f"{p.memory_gb:.2f} GiB ({p.memory_note}) |")
    return "\n".join(lines + [f"- {n}" for n in notes]) + "\n"
