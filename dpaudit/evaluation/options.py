"""One frozen description of what an evaluation is asked to do, validated once (docs/architecture.md, Options).

    opts = EvalOptions(attacks=("loss", "exposure"), batch_size=32)   # None: the manifest's plan decides
    resolved = opts.resolve(manifest)                                 # refused if it departs from the plan

The CLI (``dpaudit evaluate``), the Python API (:func:`dpaudit.api.evaluate`), the config's ``[evaluate]``
section (``dpaudit run``) and the shards all build an :class:`EvalOptions`; :meth:`EvalOptions.resolve` takes
the evaluation plan fixed in the manifest before training (:mod:`dpaudit.canaries.plan`) and gives the
:class:`Resolved` settings every step reads. Every bound lives here, once. No torch here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from dpaudit import checks, options
from dpaudit.canaries import plan as eval_plan
from dpaudit.errors import DpauditError

MAX_REFERENCES = checks.MAX_REFERENCES
MAX_BATCH = 4096
# the options a shard's partial records, which every shard of one evaluation must share (dpaudit.evaluation.shards)
SHARD_KEYS = ("attacks", "rule", "confidence", "n_references", "framing", "batch_size", "enumerate_limit",
              "reference", "base_metrics", "off_plan", "base_model")


_int = checks.integer


@dataclass(frozen=True)
class EvalOptions:
    """What the caller asks for. ``attacks``, ``rule``, ``confidence`` and ``n_references`` left None take the
    manifest's evaluation plan (or the defaults, for a manifest without one); a value that departs from the
    plan is refused unless ``off_plan``. ``enumerate_limit``: rank exposure over the whole space when it has at
    most this many secrets (None: whenever the token trie fits its budget; 0: never). ``framing``: how a
    canary is tokenised (``auto``: BOS + text + EOS for dpaudit's checkpoints). ``reference``: the reference
    attack's model (a folder, or a model object from the Python API). ``whitebox_queries``: PMixED only.
    ``device``: where the model runs (None: left where it is). ``base_model``: a LoRA adapter's base folder when
    the checkpoint does not ship it (recorded in the report, covered by its hash)."""

    attacks: tuple[str, ...] | None = None
    rule: str | None = None
    confidence: float | None = None
    n_references: int | None = None
    enumerate_limit: int | None = None
    batch_size: int = 64
    framing: str = "auto"
    reference: object = None
    base_metrics: bool = False
    off_plan: bool = False
    whitebox_queries: int = 64
    device: str | None = "auto"
    base_model: str | None = None

    def __post_init__(self):
        if isinstance(self.attacks, str):
            object.__setattr__(self, "attacks", tuple(a.strip() for a in self.attacks.split(",") if a.strip()))
        elif self.attacks is not None:
            object.__setattr__(self, "attacks", tuple(dict.fromkeys(self.attacks)))
        if isinstance(self.reference, Path):
            object.__setattr__(self, "reference", str(self.reference))
        if isinstance(self.base_model, Path):
            object.__setattr__(self, "base_model", str(self.base_model))
        checks.evaluation_settings(self.attacks, self.rule, self.confidence, self.n_references)
        if self.enumerate_limit is not None:
            _int("enumerate_limit (0: never enumerate; leave it out for the default)", self.enumerate_limit, 0)
        _int("batch_size", self.batch_size, 1, MAX_BATCH)
        _int("whitebox_queries", self.whitebox_queries, 0)
        if self.framing not in ("auto",) + options.FRAMINGS:
            raise DpauditError(f"unknown canary framing {self.framing!r}; choose auto, {', '.join(options.FRAMINGS)}")
        for name in ("base_metrics", "off_plan"):
            if not isinstance(getattr(self, name), bool):
                raise DpauditError(f"{name} must be true or false, got {getattr(self, name)!r}")

    def plan(self, canary_plan=None) -> dict:
        """The evaluation plan these options fix in a manifest before training (defaults where None; the default
        attacks follow ``canary_plan``'s design, :func:`dpaudit.canaries.plan.default_attacks`)."""
        d = eval_plan.DEFAULTS
        return eval_plan.planned(self.attacks or eval_plan.default_attacks(canary_plan), self.rule or d["rule"],
                                 d["confidence"] if self.confidence is None else self.confidence,
                                 self.n_references or d["n_references"])

    @classmethod
    def from_shard_record(cls, record: dict) -> EvalOptions:
        """The options a shard's partial recorded (:meth:`Resolved.shard_record`), to resolve them again."""
        unknown = sorted(set(record) - set(SHARD_KEYS))
        if unknown:
            raise DpauditError(f"a partial records an unknown evaluation option {unknown[0]!r}; re-run the shards "
                               "with this dpaudit")
        return cls(**{k: tuple(v) if k == "attacks" and v is not None else v for k, v in record.items()})

    def resolve(self, manifest, framing: str | None = None, framing_source: str = "checkpoint") -> Resolved:
        """The settings to use under ``manifest``'s evaluation plan (refused when they depart from it without
        ``off_plan``); ``framing`` is the resolved canary framing (``auto`` decided by the checkpoint)."""
        manifest.check_both_coins()
        used, entry = eval_plan.resolve(manifest.plan.evaluation, self.off_plan, attacks=self.attacks,
                                        rule=self.rule, confidence=self.confidence, n_references=self.n_references)
        # every value was checked once: the given ones by __post_init__, the plan's when the manifest was read
        attacks = tuple(dict.fromkeys(used["attacks"]))
        return Resolved(attacks=attacks, rule=used["rule"], confidence=used["confidence"],
                        n_references=used["n_references"], enumerate_limit=self.enumerate_limit,
                        batch_size=self.batch_size, framing=framing or self.framing, reference=self.reference,
                        base_metrics=self.base_metrics, off_plan=self.off_plan,
                        whitebox_queries=self.whitebox_queries, plan_entry=entry, base_model=self.base_model,
                        device=self.device, framing_source=framing_source)


@dataclass(frozen=True)
class Resolved:
    """The settings of one evaluation, every one decided (see :meth:`EvalOptions.resolve`); ``plan_entry`` is the
    report's ``audit_plan`` entry (as planned, off-plan with its departures, or unplanned); ``device`` where the
    score step runs the model (None: where it is; not part of a shard's record: shards may run anywhere)."""

    attacks: tuple[str, ...]
    rule: str
    confidence: float
    n_references: int
    enumerate_limit: int | None
    batch_size: int
    framing: str
    reference: object
    base_metrics: bool
    off_plan: bool
    whitebox_queries: int
    plan_entry: dict
    base_model: str | None = None
    device: str | None = None
    framing_source: str = "checkpoint"  # "option": --canary-framing on a checkpoint that cannot confirm it

    def shard_record(self) -> dict:
        """What a shard's partial records of these settings (JSON; the merge re-derives and compares them)."""
        if self.reference is not None and not isinstance(self.reference, str):
            raise DpauditError("sharded scoring takes the reference model as a path")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
                if k in SHARD_KEYS}
