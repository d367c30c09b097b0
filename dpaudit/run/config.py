"""TOML run configs, parsed strictly: an unknown section or key is an error that names it.

A config has shared sections ``[task]``, ``[model]``, ``[canaries]``, ``[train]``, ``[evaluate]`` and a
list of ``[[variants]]``, each a name plus ``[train]`` overrides (e.g. a non-private and a DP model
trained on the same data and canaries)::

    [train]
    epochs = 3
    [[variants]]
    name = "non-private"
    target_epsilon = inf
    [[variants]]
    name = "dp-eps8"
    target_epsilon = 8.0

(A little over 300 lines: every section's keys, types and bounds are checked here, so that each is validated in
one place.)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from dpaudit import checks, options
from dpaudit.canaries.manifest import CanaryPlan
from dpaudit.errors import DpauditError
from dpaudit.evaluation.options import EvalOptions
from dpaudit.io import jsonable, read_toml
from dpaudit.tasks.model_spec import ModelSpec
from dpaudit.tasks.task_config import TaskConfig
from dpaudit.trainers.engine_config import EngineConfig
from dpaudit.trainers.method_options import SECTIONS, FrostOptions, LmoOptions, PMixedOptions

LORA = checks.applies(lambda t, clf: t.trainable == "lora", "trainable = 'lora'")
USERS = checks.applies(lambda t, clf: t.user_level, "the user-level methods (user_dp_sgd, group_privacy)")


@dataclass(frozen=True)
class TrainerConfig:
    method: str = "dp_adam"
    trainable: str = "full"  # full | lora | head (classifier head only)
    tied_embeddings: str = field(default="untie", metadata=checks.applies(  # untie (ghost) | freeze (tied in/out)
        lambda t, clf: t.tied_embeddings == "freeze" or (t.engine.grad_sample_mode in options.GHOST_MODES
                                                         and t.trainable == "full"),
        "'freeze', or 'untie' with grad_sample_mode = 'ghost' (or 'ghost_fsdp') and trainable = 'full'"))
    lora_r: int = field(default=8, metadata=LORA)
    lora_alpha: int = field(default=16, metadata=LORA)
    lora_targets: str = field(default="attention", metadata=LORA)  # attention (q/v, Hu et al.) | all-linear
    user_cap: int = field(default=8, metadata=USERS)  # at most k records per user
    selection: str = field(default="random", metadata=USERS)  # how the k records are chosen (tasks/userlm.py)
    # paper: user_dp_sgd draws k records (random) or k chunks (random_chunk) of each sampled user at every step
    # (Chua et al., Alg. 2), group_privacy resamples users with fewer than k records up to k (Alg. 1, §6);
    # fixed: k records per user chosen once before training, users with fewer keep fewer (dpaudit before wave 3)
    user_sampling: str = field(default="paper", metadata=USERS)
    # the methods' own sections (trainers/method_options.py): [train.frost], [train.lmo], [train.pmixed]
    frost: FrostOptions = field(default_factory=FrostOptions)
    lmo: LmoOptions = field(default_factory=LmoOptions)
    pmixed: PMixedOptions = field(default_factory=PMixedOptions)
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self):
        if self.method not in options.METHODS:
            raise DpauditError(f"train.method {self.method!r} unknown; available: {', '.join(options.METHODS)}")
        if not isinstance(self.user_cap, int) or isinstance(self.user_cap, bool) or self.user_cap < 1:
            raise DpauditError(f"train.user_cap (k) must be an integer >= 1, got {self.user_cap!r}")
        for key, allowed in (("selection", options.SELECTIONS), ("tied_embeddings", options.TIED_EMBEDDINGS),
                             ("lora_targets", options.LORA_TARGETS), ("trainable", options.TRAINABLES),
                             ("user_sampling", options.USER_SAMPLING)):
            if getattr(self, key) not in allowed:
                raise DpauditError(f"train.{key} must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        if self.method == "dp_frost" and self.trainable != "full":
            raise DpauditError("train.method = 'dp_frost' chooses its own trainable partitions; leave trainable = "
                               "'full'")
        self._check_pmixed()

    def _check_pmixed(self) -> None:
        if self.method != "pmixed":
            return
        from dpaudit.pmixed.spec import PMixedSpec

        e = self.engine
        if not math.isfinite(e.target_epsilon) or e.delta is None:
            raise DpauditError("method = 'pmixed' needs a finite train.target_epsilon (eps_G) and train.delta; PMixED "
                               "without privacy is the non-private ensemble its report already shows")
        if self.trainable != "lora":
            raise DpauditError("method = 'pmixed' fine-tunes one LoRA adapter per partition: set trainable = 'lora'")
        o = self.pmixed
        PMixedSpec(n_models=o.models, epsilon=e.target_epsilon, delta=e.delta, alpha=o.alpha, queries=o.queries,
                   sample_rate=o.sample_rate, reading=o.reading)

    @property
    def user_level(self) -> bool:
        return self.method in options.USER_METHODS


@dataclass(frozen=True)
class Variant:
    name: str
    trainer: TrainerConfig


@dataclass(frozen=True)
class RunConfig:
    task: TaskConfig
    model: ModelSpec
    canaries: CanaryPlan
    evaluate: EvalOptions  # the [evaluate] section: the evaluation plan fixed with the canaries, and how to score
    variants: list[Variant]
    raw: dict

    def to_dict(self) -> dict:
        return self.raw


def _build(cls, d: dict, section: str):
    if not isinstance(d, dict):
        raise DpauditError(f"config section [{section}] must be a table")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise DpauditError(f"unknown key '{section}.{unknown[0]}' in config; valid keys: {', '.join(sorted(names))}")
    try:
        return cls(**d)
    except TypeError as e:
        raise DpauditError(f"config section [{section}]: {e}") from None


def _evaluate(d: dict) -> EvalOptions:
    """The [evaluate] section (every key of :class:`EvalOptions` but ``off_plan``: a run follows its own plan)."""
    if isinstance(d, dict) and "off_plan" in d:
        raise DpauditError("config key 'evaluate.off_plan' is not allowed: a run evaluates by the plan it fixes; pass "
                           "--off-plan to dpaudit evaluate for an exploratory re-evaluation")
    try:
        return _build(EvalOptions, d, "evaluate")
    except DpauditError as e:
        raise DpauditError(f"config section [evaluate]: {e}") from None


ENGINE_KEYS = {f.name for f in dataclasses.fields(EngineConfig)} - {"progress"}
TRAINER_KEYS = {f.name for f in dataclasses.fields(TrainerConfig)} - {"engine"}


def _trainer(d: dict, section: str) -> TrainerConfig:
    unknown = sorted(set(d) - ENGINE_KEYS - TRAINER_KEYS)
    if unknown:
        moved = unknown[0].split("_", 1)
        if moved[0] in SECTIONS and len(moved) == 2:
            raise DpauditError(f"config key '{section}.{unknown[0]}' moved to its method's section: write "
                               f"{moved[1]} = ... under [train.{moved[0]}] (or [variants.{moved[0]}] in a variant)")
        raise DpauditError(f"unknown key '{section}.{unknown[0]}' in config; valid keys: "
                           f"{', '.join(sorted(ENGINE_KEYS | TRAINER_KEYS))}")
    eng_keys = {k: v for k, v in d.items() if k in ENGINE_KEYS}
    if "accountant" not in eng_keys:  # the method's paper's own calibrating accountant (options.PAPER_ACCOUNTANT)
        eng_keys["accountant"] = options.PAPER_ACCOUNTANT.get(d.get("method", "dp_adam"), "prv")
    eng = _build(EngineConfig, eng_keys, section)
    methods = {s: _build(cls, d.get(s, {}), f"{section}.{s}") for s, (cls, _) in SECTIONS.items()}
    plain = {k: v for k, v in d.items() if k in TRAINER_KEYS and k not in SECTIONS}
    return _build(TrainerConfig, {**plain, **methods, "engine": eng}, section)


def _merged(base: dict, over: dict) -> dict:
    """A variant's [train] keys: the shared section's, overridden key by key (method sections too)."""
    out = {**base, **over}
    for s in SECTIONS:
        if isinstance(base.get(s), dict) and isinstance(over.get(s), dict):
            out[s] = {**base[s], **over[s]}
    return out


def _applicability() -> dict:
    """Every trainer key used by some variants only, with its rule (declared on the field: checks.applies)."""
    return {f.name: f.metadata["applies"] for cls in (TrainerConfig, EngineConfig) for f in dataclasses.fields(cls)
            if "applies" in f.metadata}


def _refuse_inapplicable(base: dict, overrides: list[dict], variants: list[Variant], classifier: bool) -> None:
    """A key a variant sets itself must apply to that variant; a key of the shared [train] section must apply
    to at least one variant. Otherwise it would be silently ignored: refuse it, as ModelSpec does. A method's
    section ([train.frost], ...) applies to that method only."""
    for over, v in zip(overrides, variants):
        for s in sorted(set(over) & set(SECTIONS)):
            if v.trainer.method != SECTIONS[s][1]:
                raise DpauditError(f"variant {v.name!r}: [variants.{s}] applies to method = '{SECTIONS[s][1]}' only; "
                                   "remove it from the variant")
    for s in sorted(set(base) & set(SECTIONS)):
        if not any(v.trainer.method == SECTIONS[s][1] for v in variants):
            raise DpauditError(f"[train.{s}] applies to method = '{SECTIONS[s][1]}' only and no variant is one; "
                               "remove it")
    rules = _applicability()
    for over, v in zip(overrides, variants):
        for key in sorted(set(over) & set(rules)):
            ok, where = rules[key]
            if not ok(v.trainer, classifier):
                raise DpauditError(f"variant {v.name!r}: train.{key} applies to {where} only; remove it from the "
                                   "variant")
    for key in sorted(set(base) & set(rules)):
        ok, where = rules[key]
        if not any(ok(v.trainer, classifier) for v in variants):
            raise DpauditError(f"train.{key} applies to {where} only and no variant is one; remove it from [train]")


def parse(d: dict) -> RunConfig:
    sections = {"task", "model", "canaries", "train", "evaluate", "variants"}
    unknown = sorted(set(d) - sections)
    if unknown:
        raise DpauditError(f"unknown config section [{unknown[0]}]; valid: {', '.join(sorted(sections))}")
    for name in sorted(sections - {"variants"}):  # before any section is read as a table
        if name in d and not isinstance(d[name], dict):
            raise DpauditError(f"config [{name}] must be a table ([{name}] then key = value lines), got a "
                               f"{type(d[name]).__name__}")
    if "variants" in d and not isinstance(d["variants"], list):
        raise DpauditError(f"config variants must be an array of tables ([[variants]] blocks), got a "
                           f"{type(d['variants']).__name__}")
    base = d.get("train", {})
    _trainer(base, "train")  # validate the shared section on its own, so errors name it
    variants_raw = d.get("variants") or [{"name": "model"}]
    variants = []
    for i, v in enumerate(variants_raw):
        import re

        if not isinstance(v, dict) or not isinstance(v.get("name"), str) \
                or not re.fullmatch(r"[A-Za-z0-9_-]{1,100}", v["name"]):
            raise DpauditError(f"variants[{i}] needs a 'name' of 1 to 100 ASCII letters, digits, '-' or '_' (it names "
                               "a folder)")
        over = {k: val for k, val in v.items() if k != "name"}
        variants.append(Variant(str(v["name"]), _trainer(_merged(base, over), f"variants[{i}]")))
    if len({v.name for v in variants}) != len(variants):
        dup = next(n for n in [v.name for v in variants] if [v.name for v in variants].count(n) > 1)
        raise DpauditError(f"two variants are named {dup!r}; variant names must be unique")
    task = _build(TaskConfig, d.get("task", {}), "task")
    if isinstance(d.get("model"), dict) and "path" in d["model"] and "name" in d["model"]:
        raise DpauditError("[model] has both 'name' and 'path'; give 'path' alone for your own model folder, or "
                           "'name' for a bundled model")
    model = _build(ModelSpec, d.get("model", {}), "model")
    _refuse_inapplicable(base, [{k: x for k, x in v.items() if k != "name"} for v in variants_raw], variants,
                         model.is_classifier)
    for v in variants:
        if v.trainer.method == "pmixed" and v.trainer.engine.secure_rng:
            raise DpauditError(f"variant {v.name!r}: train.secure_rng does not apply to pmixed (its adapters are "
                               "trained without noise; its randomness is drawn by the deployment at prediction time)")
        m = v.trainer.method
        on_users = m in options.USER_METHODS + options.PREDICTION_METHODS + ("dp_adam",)
        if (m in options.USER_METHODS + options.PREDICTION_METHODS) != (task.name == "userlm") and not (
                task.name == "userlm" and on_users):
            raise DpauditError(f"variant {v.name!r}: method {m} does not fit task {task.name!r}; user_dp_sgd, "
                               "group_privacy and pmixed need task.name = 'userlm', which takes those and dp_adam")
    chosen = sorted({"symbols", "excluded_pairs", "pool_source"} & set(d["canaries"] if isinstance(d.get("canaries"), dict) else {}))
    if chosen:
        raise DpauditError(f"config key 'canaries.{chosen[0]}' is not allowed: a design's pool is chosen from the base "
                           "model before training; set canaries.design and canaries.pool")
    plan = _build(CanaryPlan, d.get("canaries", {}), "canaries")
    if model.is_classifier != (task.objective == "classifier"):
        raise DpauditError(f"model {model.name!r} does not fit task.objective {task.objective!r}: classifier models "
                           "(minilm-l6, tiny-bert) need objective = 'classifier', causal LMs need 'lm' or 'label_words'")
    if model.is_classifier and plan.labels < 2:
        raise DpauditError("a classifier can only memorise (text, label) pairs: set canaries.labels = 2 "
                           "(each canary gets a random label)")
    if not model.is_classifier and any(v.trainer.trainable == "head" for v in variants):
        raise DpauditError("train.trainable = 'head' needs a classifier model (minilm-l6, tiny-bert)")
    if not model.is_classifier and plan.labels:
        raise DpauditError("canaries.labels applies to classifier models only; remove it for a causal LM")
    return RunConfig(
        task=task,
        model=model,
        canaries=plan,
        evaluate=_evaluate(d.get("evaluate", {})),
        variants=variants,
        raw=jsonable(d),
    )


def load(path: Path, only: tuple[str, ...] | list[str] = ()) -> RunConfig:
    """Parse CONFIG; ``only`` keeps the named variants (in config order), e.g. to run one of a long config."""
    cfg = parse(read_toml(path, "config file", "see configs/demo.toml for an example"))
    return select_variants(cfg, only) if only else cfg


def select_variants(cfg: RunConfig, only) -> RunConfig:
    """Keep the variants named in ``only``; data and canaries do not depend on the variants, so a variant run on
    its own trains on exactly what it trains on in the full config. The kept config's ``raw`` lists only them."""
    names = [v.name for v in cfg.variants]
    missing = [n for n in only if n not in names]
    if missing:
        raise DpauditError(f"no variant named {missing[0]!r} in the config; its variants: {', '.join(names)}")
    keep = [v for v in cfg.variants if v.name in set(only)]
    raw = dict(cfg.raw)
    if "variants" in raw:
        raw["variants"] = [v for v in raw["variants"] if v.get("name") in set(only)]
    return dataclasses.replace(cfg, variants=keep, raw=raw)
