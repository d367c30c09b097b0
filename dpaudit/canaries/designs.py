"""Canary designs as registered values, one protocol each (docs/architecture.md, "Extension points").

A design says how a canary's secret is drawn from its randomness space. It is an object with ``NAME``, ``SCORE_ON``
(what the black-box attacks score by default: ``record``, the whole canary, or ``secret``, its secret's tokens) and
three functions of the :class:`dpaudit.canaries.design.CanaryPlan` ``plan`` it serves:

* ``space_size(plan) -> int | None``: how many secrets the space holds (None: each canary's secret is its own);
* ``draw_secret(plan, rng, index) -> str``: one secret, uniform over the space, from the NumPy generator ``rng``
  (seeded from the manifest: the same plan draws the same secrets);
* ``in_space(plan, secret, index) -> bool``: whether ``secret`` is one the space holds (a loaded manifest's secrets
  are checked with it).

The four shipped designs are here (``template``, ``new-token``, ``rare-token``, ``bigram``: docs/canary_designs.md);
:func:`register` (``dpaudit.api.register_canary_design``) adds one of your own, which ``new_canaries(design=NAME)``
then draws, the manifest records and reads back (in a process that registered it), and ``evaluate`` scores like the
template design (its secret's characters found by their place in the text, the exposure attack among reference
secrets drawn from the space).
"""

from __future__ import annotations

import re

import numpy as np

from dpaudit.errors import DpauditError


def draw_symbols(rng: np.random.Generator, alphabet: str, length: int) -> str:
    """``length`` symbols of ``alphabet``, each uniform."""
    return "".join(alphabet[i] for i in rng.integers(0, len(alphabet), size=length))


def new_token(index: int, j: int) -> str:
    """The j-th of canary ``index``'s own new tokens (added to the tokenizer before training)."""
    return f"<|canary{index}.{j}|>"


class Template:
    """Symbols of ``plan.alphabet`` in the template (the baseline design)."""

    NAME, SCORE_ON = "template", "record"

    @staticmethod
    def space_size(plan) -> int | None:
        return len(plan.alphabet) ** plan.length

    @staticmethod
    def draw_secret(plan, rng, index: int) -> str:
        return draw_symbols(rng, plan.alphabet, plan.length)

    @staticmethod
    def in_space(plan, secret: str, index: int) -> bool:
        return len(secret) == plan.length and set(secret) <= set(plan.alphabet)


class NewToken:
    """Tokens of each canary's own, added to the tokenizer and embeddings before training."""

    NAME, SCORE_ON = "new-token", "secret"

    @staticmethod
    def space_size(plan) -> int | None:
        return None

    @staticmethod
    def draw_secret(plan, rng, index: int) -> str:
        return "".join(new_token(index, j) for j in range(plan.length))

    @staticmethod
    def in_space(plan, secret: str, index: int) -> bool:
        return secret == NewToken.draw_secret(plan, None, index)


class RareToken:
    """Words of a pool chosen before training (``plan.symbols``), joined by spaces."""

    NAME, SCORE_ON = "rare-token", "secret"

    @staticmethod
    def space_size(plan) -> int | None:
        return len(plan.symbols) ** plan.length

    @staticmethod
    def draw_secret(plan, rng, index: int) -> str:
        return Bigram.draw_secret(plan, rng, index)

    @staticmethod
    def in_space(plan, secret: str, index: int) -> bool:
        return Bigram.in_space(plan, secret, index)


class Bigram:
    """Words of a pool chosen before training, no adjacent pair among ``plan.excluded_pairs``."""

    NAME, SCORE_ON = "bigram", "secret"

    @staticmethod
    def space_size(plan) -> int | None:
        n = len(plan.symbols)
        if not plan.excluded_pairs:
            return n ** plan.length
        allowed = np.ones((n, n), dtype=object)  # walks of length - 1 steps avoiding the excluded pairs
        for a, b in plan.excluded_pairs:
            allowed[a, b] = 0
        ways = np.ones(n, dtype=object)
        for _ in range(plan.length - 1):
            ways = allowed.dot(ways)
        return int(sum(ways))

    @staticmethod
    def draw_secret(plan, rng, index: int) -> str:
        """Whole secrets redrawn until no adjacent pair is excluded (uniform over the allowed ones)."""
        excluded = set(plan.excluded_pairs)
        while True:
            idx = rng.integers(0, len(plan.symbols), size=plan.length).tolist()
            if not any((a, b) in excluded for a, b in zip(idx, idx[1:])):
                return " ".join(plan.symbols[i] for i in idx)

    @staticmethod
    def in_space(plan, secret: str, index: int) -> bool:
        words = secret.split(" ")
        pos = {w: i for i, w in enumerate(plan.symbols)}
        if len(words) != plan.length or any(w not in pos for w in words):
            return False
        excluded = set(plan.excluded_pairs)
        return not any((pos[a], pos[b]) in excluded for a, b in zip(words, words[1:]))


SHIPPED = {d.NAME: d for d in (Template, NewToken, RareToken, Bigram)}
_REGISTERED: dict[str, object] = {}


def get(name: str):
    """The design called ``name``.

    Raises:
        DpauditError: No such design (one line naming the known ones and how to add one).
    """
    d = SHIPPED.get(name) or _REGISTERED.get(name)
    if d is None:
        raise DpauditError(f"canaries.design must be one of {', '.join(names())}, got {name!r} (a design of your own: "
                           "dpaudit.api.register_canary_design before the manifest is made or read)")
    return d


def names() -> tuple[str, ...]:
    """Every design: the shipped ones, then the registered ones."""
    return (*SHIPPED, *_REGISTERED)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a design of a user's own (drawn and scored like the template design)."""
    return name in _REGISTERED


def register(design):
    """Add a canary design of your own (the module docstring's protocol).

    Args:
        design: An object or module with ``NAME`` (a new lowercase word), ``SCORE_ON`` (``record`` or ``secret``),
            ``space_size(plan)``, ``draw_secret(plan, rng, index)`` and ``in_space(plan, secret, index)``.

    Returns:
        The function that removes it again.

    Raises:
        DpauditError: A name that is taken or malformed, another ``SCORE_ON``, or a function missing (one line).
    """
    from dpaudit.options import SCORE_ON

    name = getattr(design, "NAME", None)
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]{0,39}", name):
        raise DpauditError(f"a canary design needs NAME, a lowercase word, got {name!r}")
    if name in SHIPPED or name in _REGISTERED:
        raise DpauditError(f"a canary design named {name!r} exists already; choose another NAME")
    if getattr(design, "SCORE_ON", None) not in SCORE_ON:
        raise DpauditError(f"canary design {name!r}: SCORE_ON must be one of {', '.join(SCORE_ON)}")
    gone = [f for f in ("space_size", "draw_secret", "in_space") if not callable(getattr(design, f, None))]
    if gone:
        raise DpauditError(f"canary design {name!r} needs {', '.join(gone)} (dpaudit/canaries/designs.py)")
    _REGISTERED[name] = design

    def remove() -> None:
        _REGISTERED.pop(name, None)

    return remove
