"""What canaries to make, before any is drawn: :class:`CanaryPlan` (m, repetitions, template, the randomness space
and its design, the fixed audit guesses, the evaluation plan) and one :class:`Canary`, with the bounds every
reader of a plan checks. :mod:`dpaudit.canaries.manifest` draws a plan into a manifest and reads it back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpaudit import checks, options
from dpaudit.canaries import designs
from dpaudit.canaries import plan as eval_plan
from dpaudit.canaries.designs import draw_symbols as _draw_secret
from dpaudit.canaries.designs import new_token  # noqa: F401 - its home was here: callers import it from this module
from dpaudit.errors import DpauditError

MAX_CANARIES = 10 ** 5  # canary records; more would take hours to score on a pretrained model
MAX_REPETITIONS = 10 ** 4  # copies of one inserted canary
POOL_DESIGNS = ("rare-token", "bigram")  # designs whose secrets are drawn from a pool chosen before training
NEW_TOKEN_INITS = ("seeded", "zero")  # new-token rows: the existing rows' mean plus seeded noise, or zero (Panda et al.)
TRAIN_ON = ("record", "secret")  # what a canary record's training loss reads: every token, or the secret's only
PREFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz"  # a random prefix's symbols (drawn per canary from the manifest seed)
MAX_RANDOM_PREFIX = 256
DEFAULT_POOL = 256
MAX_POOL = 4096


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
    design: str = "template"  # options.CANARY_DESIGNS, or one registered (dpaudit/canaries/designs.py)
    pool: int = 0  # rare-token / bigram: words in the pool (0: DEFAULT_POOL)
    # chosen before training by dpaudit.canaries.pools (never in a config): the pool's words, the adjacent pairs a
    # bigram secret may not contain (indices into symbols, seen in the public text), and how the pool was chosen
    symbols: tuple = ()
    excluded_pairs: tuple = ()
    pool_source: str = ""
    # the final-weights design (docs/canary_designs.md): new-token rows initialised to zero, a random prefix of this
    # many symbols before the secret (drawn per canary, so every canary's secret is predicted from its own context),
    # and the canary's training loss read on its secret tokens only
    init: str = "seeded"
    random_prefix: int = 0
    train_on: str = "record"
    # the rate at which each inserted canary record is Poisson-sampled at every private step, apart from the data's
    # q (Panda et al.: canaries at 0.01 over many steps); None: the data's rate. The card then accounts the larger
    # of the two rates for every record (trainers/engine.py, docs/canary_designs.md "Canaries at their own rate")
    sample_rate: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "symbols", tuple(self.symbols))
        object.__setattr__(self, "excluded_pairs", tuple(tuple(x) for x in self.excluded_pairs))
        designs.get(self.design)  # a design no one registered: one line naming the known ones
        if self.design in options.CANARY_DESIGNS and self.design != "template":
            self._check_token_design()
        self._check_final_weights_fields()
        for name, low, high in (("m", 2, MAX_CANARIES), ("repetitions", 1, MAX_REPETITIONS), ("length", 1, 64),
                                ("records_per_user", 1, MAX_CANARIES), ("seed", 0, checks.SEED_MAX)):
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
        if not isinstance(self.records_per_user, int) or isinstance(self.records_per_user, bool) or self.records_per_user < 1:
            raise DpauditError(f"canaries.records_per_user must be an integer >= 1, got {self.records_per_user!r}")
        if not isinstance(self.labels, int) or isinstance(self.labels, bool) or self.labels < 0 or self.labels == 1:
            raise DpauditError(f"canaries.labels must be 0 (text canaries) or an integer >= 2, got {self.labels!r}")
        if not isinstance(self.guess_fraction, (int, float)) or isinstance(self.guess_fraction, bool) \
                or not 0 < self.guess_fraction <= 1:
            raise DpauditError(f"canaries.guess_fraction must be in (0, 1], got {self.guess_fraction}")
        if self.evaluation is not None:
            eval_plan.check(self.evaluation, "canaries.json audit_plan.evaluation")
        self._check_sample_rate()

    def _check_sample_rate(self) -> None:
        v = self.sample_rate
        if v is None:
            return
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= 1:
            raise DpauditError(f"canaries.sample_rate must be a number in (0, 1] (or absent: the data's rate), got "
                               f"{v!r}")
        if self.records_per_user > 1 or self.labels:
            raise DpauditError("canaries.sample_rate samples canary records on their own: it is for record-level "
                               "text canaries (records_per_user = 1, labels = 0)")

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
        if not all(len(p) == 2 and all(type(i) is int and 0 <= i < n for i in p) for p in self.excluded_pairs):
            raise DpauditError("canaries: excluded_pairs must be pairs of indices into the pool's symbols")
        if self.excluded_pairs and self.design != "bigram":
            raise DpauditError("canaries: excluded_pairs belong to the bigram design only")

    def _check_final_weights_fields(self) -> None:
        if self.init not in NEW_TOKEN_INITS:
            raise DpauditError(f"canaries.init must be one of {', '.join(NEW_TOKEN_INITS)}, got {self.init!r}")
        if self.init != "seeded" and self.design != "new-token":
            raise DpauditError(f"canaries.init = {self.init!r} sets new tokens' rows: it needs design = \"new-token\"")
        if self.train_on not in TRAIN_ON:
            raise DpauditError(f"canaries.train_on must be one of {', '.join(TRAIN_ON)}, got {self.train_on!r}")
        if self.train_on == "secret" and self.design != "new-token":
            raise DpauditError("canaries.train_on = \"secret\" needs design = \"new-token\" (the secret's tokens "
                               "are found by their ids)")
        v = self.random_prefix
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_RANDOM_PREFIX:
            raise DpauditError(f"canaries.random_prefix must be an integer from 0 to {MAX_RANDOM_PREFIX}, got {v!r}")

    @property
    def owns_rows(self) -> bool:
        """Whether each canary owns coordinates of its own in the model (its new tokens' embedding rows), which
        the final-weights scores read (dpaudit/evaluation/final_weights.py)."""
        return self.design == "new-token"

    @property
    def rows_from_base(self) -> bool:
        """Whether the canaries' rows start from the seeded draw over a base model's rows (not zero): their initial
        state, which the final-weights scores subtract, is read from a base model."""
        return self.owns_rows and self.init != "zero"

    def canary_prefix(self, index: int) -> str:
        """Canary ``index``'s prefix: the template's, then (``random_prefix`` > 0) that many random letters and a
        space, drawn from the manifest's seed and the canary's index alone (regenerable, independent of its coin)."""
        if not self.random_prefix:
            return self.prefix
        rng = np.random.default_rng([self.seed, 3, index, 7919])
        return self.prefix + _draw_secret(rng, PREFIX_ALPHABET, self.random_prefix) + " "

    def text_of(self, index: int, secret: str) -> str:
        """Canary ``index``'s text: its prefix, the secret, the template's suffix."""
        return f"{self.canary_prefix(index)}{secret}{self.suffix}"

    @property
    def resolved(self) -> bool:
        """Whether the secrets can be drawn: a token design's pool has been chosen (dpaudit.canaries.pools)."""
        return self.design not in POOL_DESIGNS or len(self.symbols) >= 2

    @property
    def score_on(self) -> str:
        """What the black-box attacks score: the whole record (``record``) or the secret's tokens (``secret``)."""
        if self.evaluation and self.evaluation.get("score_on"):
            return self.evaluation["score_on"]
        return designs.get(self.design).SCORE_ON

    @property
    def space_size(self) -> int | None:
        """Secrets the randomness space holds (None for new-token: each canary's secret is its own tokens)."""
        return designs.get(self.design).space_size(self)

    def draw_secret(self, rng: np.random.Generator, index: int) -> str:
        """One secret of canary ``index``, uniform over the space (dpaudit/canaries/designs.py)."""
        return designs.get(self.design).draw_secret(self, rng, index)

    def in_space(self, secret: str, index: int) -> bool:
        """Whether ``secret`` is one the space holds."""
        return bool(designs.get(self.design).in_space(self, secret, index))

    @property
    def guesses(self) -> tuple[int, int]:
        r = max(2, int(round(self.guess_fraction * self.m)))
        return r // 2, r - r // 2
