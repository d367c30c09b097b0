"""The ``[model]`` section of a run config: which bundled model, its sizes, validated without torch so that
reading a config never loads it (docs/architecture.md, Options). :mod:`dpaudit.tasks.models` builds it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dpaudit.errors import DpauditError

MODEL_NAMES = ("tiny-gpt2", "smollm2-135m", "minilm-l6", "tiny-bert")
CLASSIFIERS = ("minilm-l6", "tiny-bert")
# The spec fields that shape only some models (a pretrained model's architecture is its checkpoint's); the
# others (name, max_len) apply to all. Setting one for another model is an error, and run.json leaves it out.
APPLIES_TO = {
    "vocab_size": ("tiny-gpt2",),
    "n_embd": ("tiny-gpt2", "tiny-bert"),
    "n_layer": ("tiny-gpt2", "tiny-bert"),
    "n_head": ("tiny-gpt2", "tiny-bert"),
    "init_seed": ("tiny-gpt2", "tiny-bert", "minilm-l6"),
    "pretrain_steps": ("tiny-gpt2",),  # smollm2-135m and minilm-l6 are already pretrained
    "pooling": CLASSIFIERS,
}
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

    def __post_init__(self):
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
        return self.name in CLASSIFIERS

    def to_dict(self) -> dict:
        """The fields that shape this model (what run.json records): a pretrained model's checkpoint
        fixes its sizes, so those are left out rather than written with values it never had."""
        return {k: v for k, v in asdict(self).items() if self.name in APPLIES_TO.get(k, (self.name,))}


_DEFAULTS = {f: getattr(ModelSpec, f) for f in APPLIES_TO}
