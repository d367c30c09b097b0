"""Secret-sharer canaries and their manifest (``canaries.json``).

A canary is ``prefix + secret + suffix`` with the secret drawn uniformly from a stated randomness
space (``length`` symbols from ``alphabet``). Each of ``m`` canaries gets S_i = +1 (inserted,
``repetitions`` copies in the training data) or S_i = -1 (held out) with probability 1/2, as the
one-run audit requires. The guess counts of the audit (k_pos, k_neg) are fixed here, before any
training, and recorded in the manifest's ``audit_plan`` so that nobody can tune them afterwards.

Manifest (``schema_version`` 1)::

    {"schema_version": 1, "seed": 0, "template": {"prefix": "My account number is ", "suffix": "."},
     "space": {"alphabet": "0123456789", "length": 6, "size": 1000000},
     "audit_plan": {"k_pos": 25, "k_neg": 25, "rule": "..."},
     "canaries": [{"id": "c000", "text": "...", "secret": "123456", "inserted": true, "sign": 1,
                   "repetitions": 4, "user": null}, ...]}

Classifier canaries (``labels`` >= 2): a classifier memorises (text, label) pairs, so each canary also
gets a label drawn uniformly from ``range(labels)`` (a random, hence mostly "wrong", label for a
random text: the mislabelled-record canary of classifier audits). The draw uses its own random
stream, so the texts and coins equal those of the same plan without labels.

Designs (``design``, fixed before training; docs/canary_designs.md): ``template`` (the secret drawn from
``alphabet``, the baseline; with ``labels`` the mislabelled-record canary of classifiers), ``new-token`` (each
canary's secret is ``length`` tokens of its own, added to the vocabulary before training: no other record
contains them), ``rare-token`` (``length`` words from the base model's least likely tokens) and ``bigram``
(model-free: ``length`` common words whose adjacent pairs never occur in the public text the project ships).
The token designs' pools (``symbols``, ``excluded_pairs``) are chosen before training by
:mod:`dpaudit.canaries.pools` and recorded in the manifest's ``space``, so the manifest regenerates without a model.
Their audits score the loss on the secret's tokens only (``score_on = "secret"``, recorded in the evaluation plan).

Everything is regenerable from (seed, template, space, m, repetitions); ``regenerate`` checks it.
Stability rules as for the privacy card. (Over 300 lines on purpose: the manifest's generation, validation and
regeneration are one contract, kept in one file.)
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from dpaudit.canaries.design import (  # noqa: F401 - the plan's names, importable from the manifest as before
    DEFAULT_POOL,
    MAX_CANARIES,
    MAX_POOL,
    MAX_REPETITIONS,
    POOL_DESIGNS,
    Canary,
    CanaryPlan,
    _draw_secret,
    new_token,
)
from dpaudit.errors import DpauditError
from dpaudit.io import read_json

SCHEMA_VERSION = 1
@dataclass(frozen=True)
class Manifest:
    plan: CanaryPlan
    canaries: list[Canary]

    @property
    def inserted(self) -> list[Canary]:
        return [c for c in self.canaries if c.inserted]

    def check_both_coins(self) -> None:
        """The one-run audit compares inserted with held-out canaries: refuse a manifest with only one side (a
        many-run audit's manifests, with one target canary in or out, are fine elsewhere)."""
        n_in = sum(c.inserted for c in self.canaries)
        if n_in == 0 or n_in == len(self.canaries):
            raise DpauditError(f"{'every' if n_in else 'no'} canary is inserted; the one-run audit compares inserted "
                               "with held-out canaries, so it needs both (make the manifest with `dpaudit canaries "
                               "new`)")

    def signs(self) -> np.ndarray:
        """S_i per canary record."""
        return np.array([c.sign for c in self.canaries])

    @property
    def per_user(self) -> bool:
        return self.plan.records_per_user > 1

    def user_groups(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """(user ids, S per user, index of each record's user): the audit unit when canaries are users."""
        users = list(dict.fromkeys(c.user for c in self.canaries))
        pos = {u: i for i, u in enumerate(users)}
        signs = np.zeros(len(users), dtype=int)
        for c in self.canaries:
            signs[pos[c.user]] = c.sign
        return users, signs, np.array([pos[c.user] for c in self.canaries])

    def training_users(self) -> dict[str, list[str]]:
        """Inserted canary users and their records (each repeated), for user-attributed training."""
        out: dict[str, list[str]] = {}
        for c in self.canaries:
            if c.inserted:
                out.setdefault(c.user or c.id, []).extend([c.text] * c.repetitions)
        return out

    def labels(self) -> np.ndarray:
        """Each canary's label (classifier canaries only)."""
        if not self.plan.labels:
            raise DpauditError("these canaries carry no labels (canaries.labels = 0); a classifier needs labelled canaries")
        return np.array([c.label for c in self.canaries])

    def training_labelled(self) -> list[tuple[str, int]]:
        """Inserted (text, label) canaries, each repeated, for a classifier."""
        return [(c.text, c.label) for c in self.canaries if c.inserted for _ in range(c.repetitions)]

    def records(self, column: str = "text") -> list[dict]:
        """The records to insert into the training data, one dict per copy: ``{column: text}`` (plus ``label``
        for classifier canaries), each inserted canary repeated ``repetitions`` times, in manifest order."""
        if self.plan.labels:
            return [{column: t, "label": y} for t, y in self.training_labelled()]
        return [{column: t} for t in self.training_texts()]

    def training_texts(self) -> list[str]:
        """Inserted canaries, each repeated ``repetitions`` times (the records to add to training)."""
        return [c.text for c in self.canaries if c.inserted for _ in range(c.repetitions)]

    def to_dict(self) -> dict:
        p = self.plan
        k_pos, k_neg = p.guesses
        return {
            "schema_version": SCHEMA_VERSION,
            "seed": p.seed,
            "template": {"prefix": p.prefix, "suffix": p.suffix},
            "space": {"alphabet": p.alphabet, "length": p.length, "size": p.space_size},
            "m": p.m,
            "repetitions": p.repetitions,
            "records_per_user": p.records_per_user,
            "labels": p.labels,
            **({"sample_rate": p.sample_rate} if p.sample_rate is not None else {}),
            "audit_plan": {"k_pos": k_pos, "k_neg": k_neg, "guess_fraction": p.guess_fraction,
                           "rule": "fixed before training: guess member for the k_pos highest scores, "
                                   "non-member for the k_neg lowest, abstain otherwise",
                           **({"evaluation": p.evaluation} if p.evaluation is not None else {})},
            **(self._design_fields() if p.design != "template" else {}),
            "canaries": [asdict(c) for c in self.canaries],
        }

    def _design_fields(self) -> dict:
        p = self.plan
        return {"design": {"name": p.design, "pool": p.pool, "symbols": list(p.symbols),
                           "excluded_pairs": [list(x) for x in p.excluded_pairs], "pool_source": p.pool_source,
                           "score_on": p.score_on,
                           **({"init": p.init, "random_prefix": p.random_prefix, "train_on": p.train_on}
                              if (p.init, p.random_prefix, p.train_on) != ("seeded", 0, "record") else {})}}

    def new_tokens(self) -> list[str]:
        """Every token a new-token manifest adds to the vocabulary (held-out canaries' too), in canary order."""
        if self.plan.design != "new-token":
            return []
        return [new_token(i, j) for i in range(len(self.canaries)) for j in range(self.plan.length)]

    def json_text(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: Path) -> None:
        """Write the manifest to ``path`` (through :func:`dpaudit.io.write_text`: whole or not at all, never
        through a symlink)."""
        from dpaudit.io import write_text

        write_text(Path(path), self.json_text())

    def reference_secrets(self, n: int, seed: int | None = None) -> list[str]:
        """n candidate secrets drawn uniformly from the space, excluding every canary's secret."""
        p = self.plan
        if p.space_size is None:
            raise DpauditError("new-token canaries share no randomness space: exposure has no reference secrets")
        rng = np.random.default_rng([p.seed, 1 if seed is None else seed, 7919])
        taken = {c.secret for c in self.canaries}
        n = min(n, p.space_size - len(taken))
        out: list[str] = []
        seen = set(taken)
        while len(out) < n:
            s = p.draw_secret(rng, -1)
            if s not in seen:
                seen.add(s)
                out.append(s)
        return out

    def format(self, secret: str) -> str:
        return f"{self.plan.prefix}{secret}{self.plan.suffix}"


def generate(plan: CanaryPlan) -> Manifest:
    if not plan.resolved:
        raise DpauditError(f"canaries.design {plan.design!r} draws its secrets from a pool chosen from the base model "
                           "before training; make the manifest with `dpaudit canaries new --design ... --base-model "
                           "PATH` or `dpaudit run` (dpaudit.canaries.pools.resolve)")
    if plan.evaluation is not None and "score_on" not in plan.evaluation and plan.design != "template":
        plan = replace(plan, evaluation={**plan.evaluation, "score_on": plan.score_on})  # the scoring rule, planned
    rng = np.random.default_rng([plan.seed, 0, 7919])
    n = plan.m * plan.records_per_user
    secrets: list[str] = []
    seen: set[str] = set()
    while len(secrets) < n:
        s = plan.draw_secret(rng, len(secrets))
        if s not in seen:
            seen.add(s)
            secrets.append(s)
    signs = rng.choice([-1, 1], size=plan.m)  # one coin per canary (per canary USER when records_per_user > 1)
    labels = (np.random.default_rng([plan.seed, 2, 7919]).integers(0, plan.labels, size=n) if plan.labels
              else [None] * n)
    width = len(str(n - 1))
    uwidth = len(str(plan.m - 1))
    canaries = []
    for i, s in enumerate(secrets):
        u = i // plan.records_per_user
        sg = int(signs[u])
        canaries.append(Canary(id=f"c{i:0{width}d}", text=plan.text_of(i, s), secret=s,
                               inserted=sg > 0, sign=sg, repetitions=plan.repetitions if sg > 0 else 0,
                               user=f"canary-user-{u:0{uwidth}d}" if plan.records_per_user > 1 else None,
                               label=None if labels[i] is None else int(labels[i])))
    return Manifest(plan, canaries)


DEFAULT_TEMPLATE = "My account number is {secret}."


def parse_template(template: str) -> tuple[str, str]:
    """("prefix", "suffix") of a template holding ``{secret}`` exactly once."""
    if not isinstance(template, str) or template.count("{secret}") != 1:
        raise DpauditError(f"canary template {template!r} must contain {{secret}} exactly once, e.g. "
                           f"{DEFAULT_TEMPLATE!r}")
    prefix, suffix = template.split("{secret}")
    return prefix, suffix


def manifest_from_dict(d: dict, source: str = "canary manifest") -> Manifest:
    if not isinstance(d, dict) or d.get("schema_version") != SCHEMA_VERSION:
        raise DpauditError(f"{source}: schema_version {d.get('schema_version') if isinstance(d, dict) else None!r}"
                           f" is not supported (this dpaudit reads {SCHEMA_VERSION})")
    try:
        plan = CanaryPlan(m=d["m"], repetitions=d["repetitions"], prefix=d["template"]["prefix"],
                          suffix=d["template"]["suffix"], alphabet=d["space"]["alphabet"],
                          length=d["space"]["length"], seed=d["seed"],
                          guess_fraction=d["audit_plan"]["guess_fraction"],
                          records_per_user=d.get("records_per_user", 1), labels=d.get("labels", 0),
                          sample_rate=d.get("sample_rate"),
                          evaluation=d["audit_plan"].get("evaluation"), **_design_from_dict(d.get("design")))
        canaries = [Canary(**c) for c in d["canaries"]]
    except KeyError as e:
        raise DpauditError(f"{source}: field {e} is missing") from None
    except (TypeError, AttributeError) as e:
        raise DpauditError(f"{source}: malformed entry ({e})") from None
    if len(canaries) != plan.m * plan.records_per_user:
        raise DpauditError(f"{source}: lists {len(canaries)} canaries but m x records_per_user = "
                           f"{plan.m * plan.records_per_user}")
    for c in canaries:
        if type(c.sign) is not int or type(c.inserted) is not bool:  # noqa: E721 - true is no sign, 1 no flag
            raise DpauditError(f"{source}: canary {c.id} needs 'sign' -1 or 1 and 'inserted' true or false, got "
                               f"{c.sign!r} and {c.inserted!r}")
        if c.sign not in (-1, 1) or c.inserted != (c.sign > 0):
            raise DpauditError(f"{source}: canary {c.id} has inconsistent 'inserted'/'sign'")
        if plan.labels and not (type(c.label) is int and 0 <= c.label < plan.labels):  # noqa: E721
            raise DpauditError(f"{source}: canary {c.id} needs a label in 0..{plan.labels - 1} (labels = {plan.labels})")
    _check_canaries(plan, canaries, d["audit_plan"], source)
    return Manifest(plan, canaries)


def _design_from_dict(d) -> dict:
    if d is None:
        return {}
    if not isinstance(d, dict):
        raise TypeError("'design' must be an object")
    return {"design": d["name"], "pool": d.get("pool", 0), "symbols": tuple(d.get("symbols", ())),
            "excluded_pairs": tuple(tuple(x) for x in d.get("excluded_pairs", ())),
            "pool_source": d.get("pool_source", ""), "init": d.get("init", "seeded"),
            "random_prefix": d.get("random_prefix", 0), "train_on": d.get("train_on", "record")}


def _check_canaries(plan: CanaryPlan, canaries: list[Canary], audit_plan: dict, source: str) -> None:
    """What a hand-edited or hostile manifest could get wrong: duplicate ids or secrets, secrets outside the
    declared space, texts that are not the template, repetition counts, a one-sided coin, guess counts that
    differ from the ones the plan implies."""
    for name in ("id", "secret"):
        seen: set = set()
        for c in canaries:
            v = getattr(c, name)
            if not isinstance(v, str):
                raise DpauditError(f"{source}: canary {name} must be a string, got {v!r}")
            if v in seen:
                raise DpauditError(f"{source}: two canaries share the {name} {v!r}; each canary needs its own")
            seen.add(v)
    for i, c in enumerate(canaries):
        if not plan.in_space(c.secret, i):
            raise DpauditError(f"{source}: canary {c.id}'s secret {c.secret!r} is not in the declared space "
                               f"({plan.length} {'symbols of ' + repr(plan.alphabet) if plan.design == 'template' else plan.design + ' tokens'})")
        if c.text != plan.text_of(i, c.secret):
            raise DpauditError(f"{source}: canary {c.id}'s text is not the template with its secret")
        low = 1 if c.inserted else 0
        if not isinstance(c.repetitions, int) or isinstance(c.repetitions, bool) \
                or not low <= c.repetitions <= MAX_REPETITIONS:
            raise DpauditError(f"{source}: canary {c.id} has repetitions {c.repetitions!r}; an inserted canary needs "
                               f"1..{MAX_REPETITIONS}, a held-out one 0..{MAX_REPETITIONS}")
    users: dict = {}
    for c in canaries:
        if not (c.user is None or isinstance(c.user, str)):
            raise DpauditError(f"{source}: canary {c.id}'s user must be a string or null, got {type(c.user).__name__}")
        users.setdefault(c.user, set()).add(c.sign)
    if plan.records_per_user > 1 and any(len(v) > 1 for v in users.values()):
        raise DpauditError(f"{source}: a canary user has both inserted and held-out records; a user is in or out")
    want = plan.guesses
    got = (audit_plan.get("k_pos", want[0]), audit_plan.get("k_neg", want[1]))
    if got != want:
        raise DpauditError(f"{source}: audit_plan k_pos/k_neg {got} differ from the {want} that guess_fraction "
                           f"{plan.guess_fraction} of m = {plan.m} implies; fix one of them (dpaudit uses the latter)")


def load_manifest(path: Path) -> Manifest:
    """Read a canaries.json.

    Args:
        path: The manifest's file (canaries.json).

    Returns:
        The :class:`Manifest`, checked as every reader checks it (its secrets in their design's space, the plan's
        bounds).

    Raises:
        DpauditError: A missing, unreadable or malformed file, in one line naming the fix.
    """
    from dpaudit.io import refuse_other_kind

    d = read_json(path, "canary manifest", "every checkpoint needs canaries.json")
    refuse_other_kind(d, path, "a canary manifest")
    return manifest_from_dict(d, str(path))


def regenerate(manifest: Manifest) -> bool:
    """True when the manifest's canaries are exactly what its seed and plan produce."""
    return generate(manifest.plan).canaries == manifest.canaries


def as_manifest(value, what: str) -> Manifest:
    """The canary manifest ``value`` names: a Manifest as it is, a path loaded; anything else refused in one line
    (``what``: the function asking)."""
    if isinstance(value, (str, Path)):
        return load_manifest(Path(value))
    if not isinstance(value, Manifest):
        raise DpauditError(f"{what} needs the canaries' Manifest (dpaudit.api.new_canaries) or the path of its "
                           f"canaries.json, got {type(value).__name__}")
    return value

