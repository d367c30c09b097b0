"""The ``[model]`` section of a run config: which bundled model, its sizes, validated without torch so that
reading a config never loads it (docs/architecture.md, Options). :mod:`dpaudit.tasks.models` builds it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dpaudit import checks
from dpaudit.errors import DpauditError

MODEL_NAMES = ("tiny-gpt2", "smollm2-135m", "minilm-l6", "tiny-bert", "local")  # local: [model] path
CLASSIFIERS = ("minilm-l6", "tiny-bert")
# The spec fields that shape only some models (a pretrained model's architecture is its checkpoint's); the
# others (name, max_len) apply to all. Setting one for another model is an error, and run.json leaves it out.
APPLIES_TO = {
    "vocab_size": ("tiny-gpt2",),
    "n_embd": ("tiny-gpt2", "tiny-bert"),
    "n_layer": ("tiny-gpt2", "tiny-bert"),
    "n_head": ("tiny-gpt2", "tiny-bert"),
    "init_seed": ("tiny-gpt2", "tiny-bert", "minilm-l6", "local"),  # local: the seed of an encoder's new head
    "pretrain_steps": ("tiny-gpt2",),  # smollm2-135m and minilm-l6 are already pretrained
    "pooling": CLASSIFIERS + ("local",),
    "path": ("local",),
}
# architectures of a local model folder (config.json "architectures"), by what dpaudit trains them as
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
CLASSIFIER_SUFFIXES = ("ForSequenceClassification",)
ENCODER_SUFFIXES = ("Model", "ForMaskedLM", "ForPreTraining")  # an encoder: dpaudit adds a seeded pooled head
N_LABELS = 2
POOLINGS = ("cls", "mean")



@dataclass(frozen=True)
class ModelSpec:
    name: str = "tiny-gpt2"
    vocab_size: int = 2048
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    max_len: int = 64
    init_seed: int = 0
    pretrain_steps: int = 0  # tiny-gpt2 only: non-private LM pre-training on public BBC news, cached
    pooling: str = "cls"  # classifiers only: what the head reads, "cls" or "mean" (see the module docstring)
    path: str = ""  # any Hugging Face model folder (name becomes "local"); a hub id where the machine is online

    def __post_init__(self):
        if not isinstance(self.path, str):
            raise DpauditError(f"model.path must be a folder path (a string), got {self.path!r}")
        if self.path and self.name == "tiny-gpt2":  # the default name: a path names the model by itself
            object.__setattr__(self, "name", "local")
        if (self.name == "local") != bool(self.path):
            raise DpauditError("model.name = 'local' goes with model.path = FOLDER (and a path with no name); give "
                               "one of them")
        if self.path:
            self.kind  # noqa: B018 - a folder that is not a usable model is refused when the config is read
        if self.name not in MODEL_NAMES:
            raise DpauditError(f"unknown model {self.name!r}; choose one of {', '.join(MODEL_NAMES)}")
        for field, (lo, hi) in LIMITS.items():  # sizes are checked before anything is allocated
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise DpauditError(f"model.{field} must be an integer from {lo} to {hi:,}, got {v!r}")
        if self.name in APPLIES_TO["n_embd"] and self.n_embd % self.n_head:
            raise DpauditError(f"model.n_embd ({self.n_embd}) must be a multiple of model.n_head ({self.n_head})")
        if self.name in APPLIES_TO["vocab_size"] + APPLIES_TO["n_embd"]:
            need = 4 * self.parameters_estimate()
            avail = available_memory()
            if avail and need > avail:
                raise DpauditError(f"model sizes (vocab_size {self.vocab_size:,}, n_embd {self.n_embd}, n_layer "
                                   f"{self.n_layer}) need about {need / 2**30:.1f} GiB for the weights alone, more than "
                                   f"this machine's {avail / 2**30:.1f} GiB; choose smaller sizes")
        checks.seed("model.init_seed", self.init_seed)
        if not isinstance(self.pretrain_steps, int) or isinstance(self.pretrain_steps, bool) or self.pretrain_steps < 0:
            raise DpauditError(f"model.pretrain_steps must be an integer >= 0, got {self.pretrain_steps!r}")
        for field, names in APPLIES_TO.items():
            if self.name not in names and getattr(self, field) != _DEFAULTS[field]:
                raise DpauditError(f"model.{field} applies to {', '.join(names)} only, not {self.name}; remove it "
                                   f"from [model]")
        if self.pooling not in POOLINGS:
            raise DpauditError(f"model.pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")

    def parameters_estimate(self) -> int:
        """Parameters of a bundled model built from these sizes (embeddings in and out, 12 n_embd^2 per layer)."""
        e = self.n_embd
        vocab = self.vocab_size if self.name == "tiny-gpt2" else 30522
        return 2 * vocab * e + self.max_len * e + self.n_layer * 12 * e * e

    @property
    def is_classifier(self) -> bool:
        return self.name in CLASSIFIERS or (self.name == "local" and self.kind != "causal")

    @property
    def kind(self) -> str:
        """``causal``, ``classifier`` (a sequence classifier as saved) or ``encoder`` (dpaudit adds a seeded head),
        read from the folder's config.json (no torch); bundled models by their name."""
        if self.name != "local":
            return "classifier" if self.name in CLASSIFIERS else "causal"
        return local_kind(self.path)

    def to_dict(self) -> dict:
        """The fields that shape this model (what run.json records): a pretrained model's checkpoint
        fixes its sizes, so those are left out rather than written with values it never had."""
        return {k: v for k, v in asdict(self).items() if self.name in APPLIES_TO.get(k, (self.name,))}


_DEFAULTS = {f: getattr(ModelSpec, f) for f in APPLIES_TO}
# bounds no real config reaches and every hostile one does (a 10^9-token vocabulary, 10^5 layers, a 10^9 context)
LIMITS = {"vocab_size": (16, 1_000_000), "n_embd": (8, 65_536), "n_layer": (1, 1_000), "n_head": (1, 1_024),
          "max_len": (8, 1_048_576)}


def available_memory() -> int | None:
    """Physical memory of this machine in bytes (None where it cannot be read)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def is_hub_id(path: str) -> bool:
    """``org/name``: a Hugging Face hub id (where it is not a local folder)."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and all(path.split("/"))


def local_kind(path: str) -> str:
    """What the model folder (or, online, hub id) at ``path`` is, from its config.json's ``architectures``."""
    import os
    from pathlib import Path

    from dpaudit.io import read_json

    p = Path(path).expanduser()
    if not p.is_dir():
        if is_hub_id(path):
            if any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE",
                                                                                   "TRANSFORMERS_OFFLINE")):
                raise DpauditError(f"model.path {path!r} is not a local folder, and this machine is offline "
                                   "(HF_HUB_OFFLINE=1): download the model to a folder and give its path")
            from huggingface_hub import hf_hub_download

            try:
                p = Path(hf_hub_download(path, "config.json")).parent
            except Exception as e:  # noqa: BLE001 - an unknown or unreachable repository is bad input
                raise DpauditError(f"model.path {path!r}: the hub has no such model or cannot be reached ({e})") from None
        else:
            raise DpauditError(f"model.path {path!r} is not a folder; give a Hugging Face model folder "
                               "(config.json, tokenizer, .safetensors weights)")
    # size-capped and strict: a 30 GB or NaN-holding config.json is refused unread
    cfg = read_json(p / "config.json", f"model.path {path!r}: config.json", "save the model with save_pretrained")
    if not isinstance(cfg, dict):
        raise DpauditError(f"model.path {path!r}: config.json must hold a JSON object; save the model with "
                           "save_pretrained")
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise DpauditError(f"{p}/config.json names no 'architectures'; save the model with save_pretrained")
    for kind, ends in (("causal", CAUSAL_SUFFIXES), ("classifier", CLASSIFIER_SUFFIXES), ("encoder", ENCODER_SUFFIXES)):
        if any(a.endswith(ends) for a in archs):
            return kind
    raise DpauditError(f"{p}: architecture {archs[0]} is neither a causal LM, a sequence classifier nor an encoder; "
                       "dpaudit trains those")
