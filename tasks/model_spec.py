"""The ``[model]`` section of a run config: which bundled model, its sizes, validated without torch so that
reading a config never loads it (docs/architecture.md, Options). :mod:`dpaudit.tasks.models` builds it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

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
        if self.max_len < 8:
            raise DpauditError(f"model.max_len must be >= 8, got {self.max_len}")
        if not isinstance(self.pretrain_steps, int) or self.pretrain_steps < 0:
            raise DpauditError(f"model.pretrain_steps must be an integer >= 0, got {self.pretrain_steps!r}")
        for field, names in APPLIES_TO.items():
            if self.name not in names and getattr(self, field) != _DEFAULTS[field]:
                raise DpauditError(f"model.{field} applies to {', '.join(names)} only, not {self.name}; remove it "
                                   f"from [model]")
        if self.pooling not in POOLINGS:
            raise DpauditError(f"model.pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")

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


def is_hub_id(path: str) -> bool:
    """``org/name``: a Hugging Face hub id (where it is not a local folder)."""
    return path.count("/") == 1 and not path.startswith((".", "/", "~")) and all(path.split("/"))


def local_kind(path: str) -> str:
    """What the model folder (or, online, hub id) at ``path`` is, from its config.json's ``architectures``."""
    import json
    import os
    from pathlib import Path

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
    try:
        cfg = json.loads((p / "config.json").read_text())
        archs = cfg.get("architectures") or []
    except (OSError, ValueError, AttributeError):
        raise DpauditError(f"model.path {path!r} has no readable config.json; save the model with "
                           "save_pretrained") from None
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise DpauditError(f"{p}/config.json names no 'architectures'; save the model with save_pretrained")
    for kind, ends in (("causal", CAUSAL_SUFFIXES), ("classifier", CLASSIFIER_SUFFIXES), ("encoder", ENCODER_SUFFIXES)):
        if any(a.endswith(ends) for a in archs):
            return kind
    raise DpauditError(f"{p}: architecture {archs[0]} is neither a causal LM, a sequence classifier nor an encoder; "
                       "dpaudit trains those")
