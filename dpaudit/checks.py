"""Validation predicates shared by every reader of user input (cards, manifests, configs, policies, reports, the
command line), so that "a number" and "a confidence" mean the same everywhere. No heavy imports."""

from __future__ import annotations

import math

from dpaudit.errors import DpauditError


def number(x) -> bool:
    """An int or float that is neither a bool nor NaN (infinities pass: bound them where they matter)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def finite(x) -> bool:
    """A :func:`number` that is not infinite."""
    return number(x) and math.isfinite(x)


def check_confidence(c, what: str) -> None:
    """A confidence level of an audit bound: in [0.5, 1); anything else is one line of bad input."""
    if not number(c) or not 0.5 <= c < 1:
        raise DpauditError(f"{what} must be in [0.5, 1) (e.g. 0.95), got {c!r}")


def applies(when, where: str) -> dict:
    """Field metadata of a config option used by some runs only: ``when(trainer, classifier)`` says whether it
    applies to a variant's resolved trainer config, ``where`` names those runs. dpaudit/config.py refuses an option
    set where it would be silently ignored; the rule lives beside the option it governs."""
    return {"applies": (when, where)}
