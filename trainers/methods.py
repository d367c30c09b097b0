"""Every training method behind one protocol (docs/architecture.md, "One method protocol").

    method = methods.get("dp_frost")
    folder = method.fit(cfg, variant, data, manifest, out, snapshots=None)

Each method module exposes ``fit(cfg, variant, data, manifest, out, snapshots=None) -> Path`` (the folder it
wrote: a checkpoint, or for PMixED a deployment, which ``dpaudit evaluate`` tells apart by its files) and a
``plan(cfg, variant, n_records, users, manifest)`` giving the dry run its sampling, noise and claim
(:class:`.planning.MechanismPlan`), and declares what it supports. Adding a method is one module and one line
here (and its name in ``dpaudit.options.METHODS``, which this registry must match).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from dpaudit import options
from dpaudit.errors import DpauditError
from dpaudit.trainers import dp_adam, dp_frost, engine, lmo_dp, pmixed, user_dp


@dataclass(frozen=True)
class Method:
    """A training method: its ``fit`` and its declared capabilities. ``snapshots``: training can be snapshotted
    and resumed mid-run (one engine run per variant); a method without it retrains an interrupted variant from
    its start with the same seeds."""

    name: str
    module: ModuleType
    snapshots: bool
    gaussian_target: bool = False  # calibrates one record-level Gaussian to train.target_epsilon: a target no noise
    # reaches is refused before any variant trains (dpaudit.run.pipeline's preflight)
    canary_rate: bool = False  # samples the canaries at canaries.sample_rate (a config that sets it with a method
    # lacking this is refused before any variant trains)
    plan: Callable | None = None  # (cfg, variant, n_records, users, manifest) -> planning.MechanismPlan; None: the
    # module's own ``plan``
    preflight: Callable | None = None  # (cfg, variant, data, manifest) -> None: what the variant would refuse at its
    # start, refused before any variant trains; None: the record-level plan's checks (dpaudit.run.pipeline)

    def fit(self, cfg, variant, data, manifest, out, snapshots=None):
        if snapshots is not None and not self.snapshots:
            raise DpauditError(f"method {self.name!r} does not write training snapshots")
        return self.module.fit(cfg, variant, data, manifest, out, snapshots=snapshots)

    def mechanism_plan(self, cfg, variant, n_records: int, users: int | None, manifest):
        """What this method will do to one variant, before training (the dry run's one question): its
        :class:`.planning.MechanismPlan`. A method that states none is refused, never planned as another's."""
        plan = self.plan or getattr(self.module, "plan", None)
        if plan is None:
            raise DpauditError(f"method {self.name!r} states no plan of its mechanism, so --dry-run cannot say its "
                               "noise or claim; give its module a plan(cfg, variant, n_records, users, manifest) "
                               "(trainers/planning.py)")
        return plan(cfg, variant, n_records, users, manifest)


REGISTRY = {m.name: m for m in (
    Method("dp_adam", dp_adam, snapshots=True, gaussian_target=True, canary_rate=True),
    Method("dp_frost", dp_frost, snapshots=False, preflight=dp_frost.preflight),  # two phases (selection, training): retrained on resume
    Method("lmo_dp", lmo_dp, snapshots=True, preflight=lmo_dp.preflight),
    Method("user_dp_sgd", user_dp, snapshots=True, plan=user_dp.user_plan, preflight=user_dp.preflight),
    Method("group_privacy", user_dp, snapshots=True, plan=user_dp.group_plan, preflight=user_dp.preflight),
    Method("pmixed", pmixed, snapshots=False),  # N adapters: retrained on resume
)}
assert tuple(sorted(REGISTRY)) == tuple(sorted(options.METHODS)), "trainers.methods must list options.METHODS"


def preflight(cfg, variant, data, manifest, n_records: int) -> None:
    """What ``variant`` would refuse only at its start, refused now (``dpaudit run`` before its first variant trains,
    and ``--dry-run``): the method's own ``preflight``, else the record-level plan's step count over ``n_records``;
    the error names the variant."""
    own = get(variant.trainer.method).preflight
    try:
        if own is not None:
            own(cfg, variant, data, manifest)
        elif n_records > 0:
            engine.record_plan(n_records, variant.trainer.engine)
    except DpauditError as e:
        raise DpauditError(f"variant {variant.name!r}: {e}") from None


def check_canary_rate(variant, rate: float | None) -> None:
    """A config whose canaries have a sampling rate of their own (``canaries.sample_rate``) and a private variant
    whose method samples every record at one rate: refused in one line before any variant trains (and by the
    dry run)."""
    if rate is not None and variant.trainer.engine.private and not get(variant.trainer.method).canary_rate:
        raise DpauditError(f"variant {variant.name!r}: method {variant.trainer.method!r} samples every record at one "
                           "rate; canaries.sample_rate is honoured by dp_adam only: remove it or train with dp_adam")


def get(name: str) -> Method:
    """The method called ``name`` (one of :data:`dpaudit.options.METHODS`)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise DpauditError(f"unknown method {name!r}; available: {', '.join(options.METHODS)}") from None
