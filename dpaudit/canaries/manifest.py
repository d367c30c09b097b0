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

from dpaudit import options
from dpaudit.canaries import plan as eval_plan
from dpaudit.errors import DpauditError
from dpaudit.io import read_json

SCHEMA_VERSION = 1
MAX_CANARIES = 10 ** 5  # canary records; more would take hours to score on a pretrained model
MAX_REPETITIONS = 10 ** 4  # copies of one inserted canary
POOL_DESIGNS = ("rare-token", "bigram")  # designs whose secrets are drawn from a pool chosen before training
DEFAULT_POOL = 256
MAX_POOL = 4096


def new_token(index: int, j: int) -> str:
    """The j-th of canary ``index``'s own new tokens (added to the tokenizer before training)."""
    return f"<|canary{index}.{j}|>"


@dataclass(frozen=True)
class Canary:
    id: str
    text: str
    secret: str
    inserted: bool
    sign: int
    repetitions: int
    user: str | None = None
    label: int | None = None


@dataclass(frozen=True)
class CanaryPlan:
    """What to plant: m canaries, the template, the randomness space and the fixed audit guesses."""

    m: int = 100
    repetitions: int = 1
    prefix: str = "My account number is "
    suffix: str = "."
    alphabet: str = "0123456789"
    length: int = 6
    seed: int = 0
    guess_fraction: float = 0.5  # r = guess_fraction * m guesses, split evenly between k_pos and k_neg
    records_per_user: int = 1  # > 1: m canary USERS, each owning this many canary records (all in or all out)
    labels: int = 0  # >= 2: classifier canaries, each with a random label in range(labels)
    evaluation: dict | None = None  # the evaluation plan fixed before training (dpaudit/canaries/plan.py)
    design: str = "template"  # options.CANARY_DESIGNS
    pool: int = 0  # rare-token / bigram: words in the pool (0: DEFAULT_POOL)
    # chosen before training by dpaudit.canaries.pools (never in a config): the pool's words, the adjacent pairs a
    # bigram secret may not contain (indices into symbols, seen in the public text), and how the pool was chosen
    symbols: tuple = ()
    excluded_pairs: tuple = ()
    pool_source: str = ""

    def __post_init__(self):
        object.__setattr__(self, "symbols", tuple(self.symbols))
        object.__setattr__(self, "excluded_pairs", tuple(tuple(x) for x in self.excluded_pairs))
        if self.design not in options.CANARY_DESIGNS:
            raise DpauditError(f"canaries.design must be one of {', '.join(options.CANARY_DESIGNS)}, got "
                               f"{self.design!r}")
        if self.design != "template":
            self._check_token_design()
        for name, low, high in (("m", 2, MAX_CANARIES), ("repetitions", 1, MAX_REPETITIONS), ("length", 1, 64),
                                ("records_per_user", 1, MAX_CANARIES), ("seed", 0, 2 ** 63 - 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                raise DpauditError(f"canaries.{name} must be an integer from {low} to {high}, got {v!r}")
        for name in ("prefix", "suffix", "alphabet"):
            if not isinstance(getattr(self, name), str):
                raise DpauditError(f"canaries.{name} must be a string, got {getattr(self, name)!r}")
        if self.m * self.records_per_user > MAX_CANARIES:
            raise DpauditError(f"canaries: m x records_per_user must be at most {MAX_CANARIES}")
        if len(set(self.alphabet)) != len(self.alphabet) or len(self.alphabet) < 2:
            raise DpauditError("canaries.alphabet needs >= 2 symbols, each once")
        if self.resolved and self.space_size is not None and self.space_size < 10 * self.m * self.records_per_user:
            raise DpauditError("canary randomness space is too small for m canaries; raise canaries.length"
                               + (" or canaries.pool" if self.design in POOL_DESIGNS else ""))
        if not isinstance(self.records_per_user, int) or self.records_per_user < 1:
            raise DpauditError(f"canaries.records_per_user must be an integer >= 1, got {self.records_per_user!r}")
        if not isinstance(self.labels, int) or self.labels < 0 or self.labels == 1:
            raise DpauditError(f"canaries.labels must be 0 (text canaries) or an integer >= 2, got {self.labels!r}")
        if not isinstance(self.guess_fraction, (int, float)) or not 0 < self.guess_fraction <= 1:
            raise DpauditError(f"canaries.guess_fraction must be in (0, 1], got {self.guess_fraction}")
        if self.evaluation is not None:
            eval_plan.check(self.evaluation, "canaries.json audit_plan.evaluation")

    def _check_token_design(self) -> None:
        if self.labels:
            raise DpauditError(f"canaries.design {self.design!r} is for language models; a classifier's canaries are "
                               "mislabelled records (design = \"template\" with labels >= 2)")
        if not isinstance(self.pool, int) or isinstance(self.pool, bool) or not (self.pool == 0 or 8 <= self.pool
                                                                                  <= MAX_POOL):
            raise DpauditError(f"canaries.pool must be 0 (the default {DEFAULT_POOL}) or an integer from 8 to "
                               f"{MAX_POOL}, got {self.pool!r}")
        if self.length > 16:
            raise DpauditError(f"canaries.length counts tokens for design {self.design!r}: at most 16, got {self.length}")
        if self.design == "new-token" and (self.symbols or self.excluded_pairs):
            raise DpauditError("new-token canaries draw no pool: symbols and excluded_pairs must be empty")
        if not all(isinstance(w, str) and w and w.isalpha() for w in self.symbols) \
                or len(set(self.symbols)) != len(self.symbols):
            raise DpauditError("canaries: the pool's symbols must be distinct words of letters")
        n = len(self.symbols)
        if not all(len(p) == 2 and all(isinstance(i, int) and 0 <= i < n for i in p) for p in self.excluded_pairs):
            raise DpauditError("canaries: excluded_pairs must be pairs of indices into the pool's symbols")
        if self.excluded_pairs and self.design != "bigram":
            raise DpauditError("canaries: excluded_pairs belong to the bigram design only")

    @property
    def resolved(self) -> bool:
        """Whether the secrets can be drawn: a token design's pool has been chosen (dpaudit.canaries.pools)."""
        return self.design not in POOL_DESIGNS or len(self.symbols) >= 2

    @property
    def score_on(self) -> str:
        """What the black-box attacks score: the whole record (``record``) or the secret's tokens (``secret``)."""
        if self.evaluation and self.evaluation.get("score_on"):
            return self.evaluation["score_on"]
        return "record" if self.design == "template" else "secret"

    @property
    def space_size(self) -> int | None:
        """Secrets the randomness space holds (None for new-token: each canary's secret is its own tokens)."""
        if self.design == "template":
            return len(self.alphabet) ** self.length
        if self.design == "new-token":
            return None
        n = len(self.symbols)
        if self.design == "rare-token" or not self.excluded_pairs:
            return n ** self.length
        allowed = np.ones((n, n), dtype=object)  # walks of length - 1 steps avoiding the excluded pairs
        for a, b in self.excluded_pairs:
            allowed[a, b] = 0
        ways = np.ones(n, dtype=object)
        for _ in range(self.length - 1):
            ways = allowed.dot(ways)
        return int(sum(ways))

    def draw_secret(self, rng: np.random.Generator, index: int) -> str:
        """One secret: the template's symbols, or a token design's words (joined by spaces), drawn uniformly from
        the space (bigram: whole secrets redrawn until no adjacent pair is excluded); new-token: canary
        ``index``'s own tokens."""
        if self.design == "new-token":
            return "".join(new_token(index, j) for j in range(self.length))
        if self.design == "template":
            return _draw_secret(rng, self.alphabet, self.length)
        excluded = set(self.excluded_pairs)
        while True:
            idx = rng.integers(0, len(self.symbols), size=self.length).tolist()
            if not any((a, b) in excluded for a, b in zip(idx, idx[1:])):
                return " ".join(self.symbols[i] for i in idx)

    def in_space(self, secret: str, index: int) -> bool:
        if self.design == "template":
            return len(secret) == self.length and set(secret) <= set(self.alphabet)
        if self.design == "new-token":
            return secret == self.draw_secret(None, index)
        words = secret.split(" ")
        pos = {w: i for i, w in enumerate(self.symbols)}
        if len(words) != self.length or any(w not in pos for w in words):
            return False
        excluded = set(self.excluded_pairs)
        return not any((pos[a], pos[b]) in excluded for a, b in zip(words, words[1:]))

    @property
    def guesses(self) -> tuple[int, int]:
        r = max(2, int(round(self.guess_fraction * self.m)))
        return r // 2, r - r // 2


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
                           "score_on": p.score_on}}

    def new_tokens(self) -> list[str]:
        """Every token a new-token manifest adds to the vocabulary (held-out canaries' too), in canary order."""
        if self.plan.design != "new-token":
            return []
        return [new_token(i, j) for i in range(len(self.canaries)) for j in range(self.plan.length)]

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

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


def _draw_secret(rng: np.random.Generator, alphabet: str, length: int) -> str:
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=length))


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
        canaries.append(Canary(id=f"c{i:0{width}d}", text=f"{plan.prefix}{s}{plan.suffix}", secret=s,
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
        if c.sign not in (-1, 1) or c.inserted != (c.sign > 0):
            raise DpauditError(f"{source}: canary {c.id} has inconsistent 'inserted'/'sign'")
        if plan.labels and not (isinstance(c.label, int) and 0 <= c.label < plan.labels):
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
            "pool_source": d.get("pool_source", "")}


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
        if c.text != f"{plan.prefix}{c.secret}{plan.suffix}":
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
    return manifest_from_dict(read_json(path, "canary manifest", "every checkpoint needs canaries.json"),
                              str(path))


def regenerate(manifest: Manifest) -> bool:
    """True when the manifest's canaries are exactly what its seed and plan produce."""
    return generate(manifest.plan).canaries == manifest.canaries
