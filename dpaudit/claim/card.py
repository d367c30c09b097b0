"""The privacy card: the claim a checkpoint makes and the mechanism that makes it.

``privacy_card.json`` is written by every dpaudit trainer and can be written by hand (or with
``dpaudit card``) for checkpoints made by other tools. It must let anyone re-account the claim
without our trainer.

Schema (``schema_version`` 1)::

    {
      "schema_version": 1,
      "claim": {
        "epsilon": 8.0,              # null = no claim (non-private baseline, epsilon = infinity)
        "delta": 1e-05,
        "unit": "record",            # or "user"
        "neighbouring": "add_remove",
        "accountant": "prv"          # what produced the claim: an accountant of dpaudit, "external" or "none"
      },
      "mechanism": {
        "events": [                  # composed in order; see dpaudit.accounting.events
          {"type": "subsampled_gaussian", "sample_rate": 0.0145, "noise_multiplier": 0.62,
           "steps": 300, "sampler": "poisson"}
        ],
        "clipping_norm": 1.0,
        "expected_batch_size": 64,
        "dataset_size": 4400,
        "group_size": 1              # records per privacy unit (group privacy), default 1
      },
      "method": "dp_adam",
      "trainable": "full"            # full | lora | head | subset
    }

Stability rules (as dp_accounting's DpEvent): fields are never removed, new fields are optional
with a default, meanings never change; an incompatible change bumps ``schema_version``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from dpaudit.accounting import accountant_names
from dpaudit.accounting.events import event_from_dict
from dpaudit.checks import finite
from dpaudit.errors import DpauditError
from dpaudit.io import read_json
from dpaudit.options import CLAIM_SOURCES, NEIGHBOURING, UNITS

MAX_EVENTS = 1000  # a card's mechanism phases (DP-FROST's K selections and trainings are 2K); each is accounted

SCHEMA_VERSION = 1
EPSILON_MAX = 500.0  # a larger claim bounds nothing a reader can use, and e^epsilon overflows a float from 709


@dataclass(frozen=True)
class Claim:
    epsilon: float | None
    delta: float
    unit: str = "record"
    neighbouring: str = "add_remove"
    accountant: str = "prv"

    @property
    def epsilon_value(self) -> float:
        return math.inf if self.epsilon is None else float(self.epsilon)


@dataclass(frozen=True)
class PrivacyCard:
    claim: Claim
    events: list = field(default_factory=list)
    clipping_norm: float | None = None
    expected_batch_size: float | None = None
    dataset_size: int | None = None
    group_size: int = 1
    method: str = "unknown"
    trainable: str = "full"
    extra: dict = field(default_factory=dict)

    @property
    def is_private(self) -> bool:
        return self.claim.epsilon is not None

    @property
    def intended(self) -> dict | None:
        """The epsilon the run was meant to spend, where it is known (``extra.intended``: ``{"epsilon", "source"}``,
        e.g. the target given to Opacus' ``make_private_with_epsilon``): the claim is what ran, this what was
        planned; the gate fails a run that spent more (docs/verdicts.md)."""
        x = (self.extra or {}).get("intended")
        return x if isinstance(x, dict) else None

    def canary_sample_rate(self) -> float | None:
        """The rate the planted canaries were Poisson-sampled at, where the run gave them one of their own
        (``extra.sampling.canaries``, written by dpaudit's dp_adam); None when every record ran at the card's rate
        or the record is not a rate in (0, 1]."""
        x = (self.extra or {}).get("sampling")
        rate = x.get("canaries") if isinstance(x, dict) else None
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 1:
            return None
        return float(rate)

    def audited_mechanism(self):
        """The one subsampled Gaussian (sigma > 0) an audit of this card is about, typed
        (:class:`dpaudit.audit.mechanism.Audited`), or None and why there is none."""
        from dpaudit.accounting.events import SubsampledGaussian
        from dpaudit.audit.mechanism import Audited, GaussianMechanism

        gauss = [e for e in self.events if isinstance(e, SubsampledGaussian)]
        if len(gauss) != 1:
            return Audited(None, f"the card's mechanism has {len(gauss)} subsampled Gaussian events, not one")
        ev = gauss[0]  # sigma > 0: an event refuses any other
        return Audited(GaussianMechanism(float(ev.sample_rate), float(ev.noise_multiplier), int(ev.steps),
                                         alone=len(self.events) == 1))

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "claim": {
                "epsilon": self.claim.epsilon,
                "delta": self.claim.delta,
                "unit": self.claim.unit,
                "neighbouring": self.claim.neighbouring,
                "accountant": self.claim.accountant,
            },
            "mechanism": {
                "events": [e.to_dict() for e in self.events],
                "clipping_norm": self.clipping_norm,
                "expected_batch_size": self.expected_batch_size,
                "dataset_size": self.dataset_size,
                "group_size": self.group_size,
            },
            "method": self.method,
            "trainable": self.trainable,
            **({"extra": self.extra} if self.extra else {}),
        }

    def json_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: Path) -> None:
        """Write the card to ``path`` (through :func:`dpaudit.io.write_text`: whole or not at all, never through a
        symlink)."""
        from dpaudit.io import write_text

        write_text(Path(path), self.json_text())


def _check_extra(extra: dict, source: str) -> None:
    """The entries of ``extra`` that dpaudit reads, each of its type (the rest is the writer's own and kept as is)."""
    rng = extra.get("rng")
    if rng is not None and not (isinstance(rng, dict) and isinstance(rng.get("mode"), str)):
        raise DpauditError(f"{source}: extra.rng must be {{\"mode\": \"secure\" or \"seeded\", ...}} (where the noise's "
                           f"randomness came from), got {str(rng)[:60]!r}")
    seed = (rng or {}).get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise DpauditError(f"{source}: extra.rng.seed must be the noise's seed (an integer >= 0) or absent, got "
                           f"{seed!r}")
    runs = extra.get("probe_runs")
    if runs is not None and not (isinstance(runs, list) and all(isinstance(x, str) for x in runs)):
        raise DpauditError(f"{source}: extra.probe_runs must be a list of probe run ids (strings), got {str(runs)[:60]!r}")
    rl = extra.get("record_level")
    if rl is not None and not (isinstance(rl, dict) and finite(rl.get("epsilon")) and rl["epsilon"] > 0
                               and finite(rl.get("delta")) and 0 <= rl["delta"] < 1):
        raise DpauditError(f"{source}: extra.record_level must be {{\"epsilon\": a finite number > 0, \"delta\": in [0, 1)}} "
                           f"(group privacy's record-level claim), got {str(rl)[:80]!r}")
    digest = extra.get("manifest_digest")
    if digest is not None and not isinstance(digest, str):
        raise DpauditError(f"{source}: extra.manifest_digest must be the manifest's digest (a string), got {digest!r}")


def card_from_dict(d: dict, source: str = "privacy card") -> PrivacyCard:
    if not isinstance(d, dict):
        raise DpauditError(f"{source}: expected a JSON object")
    if d.get("schema_version") != SCHEMA_VERSION or isinstance(d.get("schema_version"), bool):
        raise DpauditError(f"{source}: schema_version {d.get('schema_version')!r} is not supported "
                           f"(this dpaudit reads {SCHEMA_VERSION})")
    c = _need(d, "claim", source, dict)
    eps = c.get("epsilon", "missing")
    if eps == "missing":
        raise DpauditError(f"{source}: claim.epsilon is missing (use null for a non-private model)")
    if eps is not None and (not finite(eps) or not 0 < eps <= EPSILON_MAX):
        raise DpauditError(f"{source}: claim.epsilon must be a finite number in (0, {EPSILON_MAX:g}], or null for no "
                           f"claim, got {eps!r}")
    delta = _need(c, "delta", source + ": claim", (int, float))
    if not finite(delta) or not 0 <= delta < 1 or (eps is not None and delta <= 0):
        raise DpauditError(f"{source}: claim.delta must be in (0, 1), got {delta}")
    unit = c.get("unit", "record")
    if unit not in UNITS:
        raise DpauditError(f"{source}: claim.unit must be one of {UNITS}, got {unit!r}")
    neigh = c.get("neighbouring", "add_remove")
    if neigh not in NEIGHBOURING:
        raise DpauditError(f"{source}: claim.neighbouring must be one of {NEIGHBOURING}, got {neigh!r}")
    acc = c.get("accountant", "prv")
    if acc not in CLAIM_SOURCES and acc not in accountant_names():  # a registered accountant may claim too
        raise DpauditError(f"{source}: claim.accountant {acc!r} unknown; known: {', '.join(CLAIM_SOURCES)}")
    m = _need(d, "mechanism", source, dict)
    raw = m.get("events", [])
    if not isinstance(raw, list) or len(raw) > MAX_EVENTS:
        raise DpauditError(f"{source}: mechanism.events must be a list of at most {MAX_EVENTS} events (each with its "
                           "own steps); merge repeated identical phases into one event with more steps")
    events = []
    for i, e in enumerate(raw):
        try:
            events.append(event_from_dict(e))
        except DpauditError as err:  # the event's own check, told which file and which event it was
            raise DpauditError(f"{source}: mechanism.events[{i}]: {err}") from None
    if eps is not None and not events:
        raise DpauditError(f"{source}: a finite epsilon needs mechanism.events describing the noise")
    group = m.get("group_size", 1)
    if not isinstance(group, int) or isinstance(group, bool) or group < 1:
        raise DpauditError(f"{source}: mechanism.group_size must be an integer >= 1, got {group!r}")
    for key in ("clipping_norm", "expected_batch_size"):
        v = m.get(key)
        if v is not None and (not finite(v) or not v > 0):
            raise DpauditError(f"{source}: mechanism.{key} must be a finite number > 0 (or absent), got {v!r}")
    n = m.get("dataset_size")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise DpauditError(f"{source}: mechanism.dataset_size must be an integer >= 1 (or absent), got {n!r}")
    for key in ("method", "trainable"):
        if not isinstance(d.get(key, ""), str):
            raise DpauditError(f"{source}: {key} must be a string, got {d.get(key)!r}")
    if not isinstance(d.get("extra", {}), dict):
        raise DpauditError(f"{source}: extra must be an object")
    _check_extra(d.get("extra", {}), source)
    intended = d.get("extra", {}).get("intended")
    if intended is not None and not (isinstance(intended, dict) and finite(intended.get("epsilon"))
                                     and intended["epsilon"] > 0 and isinstance(intended.get("source", ""), str)):
        raise DpauditError(f"{source}: extra.intended must be {{\"epsilon\": a finite number > 0, \"source\": a "
                           f"string}} (the epsilon the run was meant to spend), got {intended!r}")
    return PrivacyCard(
        claim=Claim(epsilon=eps, delta=float(delta), unit=unit, neighbouring=neigh, accountant=acc),
        events=events, clipping_norm=m.get("clipping_norm"), expected_batch_size=m.get("expected_batch_size"),
        dataset_size=m.get("dataset_size"), group_size=group, method=d.get("method", "unknown"),
        trainable=d.get("trainable", "full"), extra=d.get("extra", {}),
    )


def load_card(path: Path) -> PrivacyCard:
    from dpaudit.io import refuse_other_kind

    d = read_json(path, "privacy card", "write one with `dpaudit card`")
    refuse_other_kind(d, path, "a privacy card")
    return card_from_dict(d, str(path))


def _need(d: dict, key: str, source: str, typ):
    if key not in d:
        raise DpauditError(f"{source}: field '{key}' is missing")
    v = d[key]
    if not isinstance(v, typ) or isinstance(v, bool):
        raise DpauditError(f"{source}: field '{key}' has the wrong type ({type(v).__name__})")
    return v
