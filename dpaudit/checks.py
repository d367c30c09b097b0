"""Validation predicates shared by every reader of user input (cards, manifests, configs, policies, reports, the
command line), so that "a number" and "a confidence" mean the same everywhere. No heavy imports."""

from __future__ import annotations

import math

from dpaudit import options
from dpaudit.errors import DpauditError

MAX_REFERENCES = 10 ** 6  # sampled reference secrets: beyond this exposure scoring takes hours


def number(x) -> bool:
    """An int or float that is neither a bool nor NaN (infinities pass: bound them where they matter)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not math.isnan(x)


def finite(x) -> bool:
    """A :func:`number` that is not infinite."""
    return number(x) and math.isfinite(x)


def counts(v) -> bool:
    """A list of integers >= 0 (no bools): a shape, offsets, indices."""
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)


def check_confidence(c, what: str) -> None:
    """A confidence level of an audit bound: in [0.5, 1); anything else is one line of bad input."""
    if not number(c) or not 0.5 <= c < 1:
        raise DpauditError(f"{what} must be in [0.5, 1) (e.g. 0.95), got {c!r}")


def applies(when, where: str) -> dict:
    """Field metadata of a config option used by some runs only: ``when(trainer, classifier)`` says whether it
    applies to a variant's resolved trainer config, ``where`` names those runs. dpaudit/run/config.py refuses an option
    set where it would be silently ignored; the rule lives beside the option it governs."""
    return {"applies": (when, where)}


def integer(name: str, v, low: int, high: int | None = None) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
        span = f"from {low:,} to {high:,}" if high is not None else f">= {low}"
        raise DpauditError(f"{name} must be an integer {span}, got {v!r}")


SEED_MAX = 2 ** 63 - 1  # every seed a config names (task, train, model, canaries): what torch and NumPy both take


def seed(name: str, v) -> None:
    """One rule for every seed of a config: an integer from 0 to :data:`SEED_MAX` (a negative one crashed NumPy's
    generator and one past 2**64 torch's, after the dry run had passed it: a hostile round, 2026-11-29)."""
    integer(name, v, 0, SEED_MAX)


def evaluation_settings(attacks, rule, confidence, n_references) -> None:
    """The bounds of an evaluation's attacks, rule, confidence and references, each checked here once: by the
    options of an evaluation (:class:`dpaudit.evaluation.options.EvalOptions`) and by the plan a manifest fixes before
    training (:func:`dpaudit.canaries.plan.check`). None: not given (nothing to check)."""
    if attacks is not None:
        known = options.attack_names()
        unknown = [a for a in attacks if a not in known]
        if unknown:
            raise DpauditError(f"unknown attack {unknown[0]!r}; choose from {', '.join(known)} (or register it: "
                               "dpaudit.attacks.register_attack)")
        if not attacks:
            raise DpauditError("no attacks selected; pass e.g. --attacks loss,exposure")
    if rule is not None and rule not in options.RULES:
        raise DpauditError(f"unknown threshold rule {rule!r}; choose from {', '.join(options.RULES)}")
    if confidence is not None:
        check_confidence(confidence, "confidence")
    if n_references is not None:
        integer("n_references (--references)", n_references, 10, MAX_REFERENCES)



def schema_validator(schema: dict):
    """A JSON Schema (2020-12) validator for the files dpaudit reads, in which "integer" means a JSON integer: the
    standard also accepts a float with no fraction (64.0), which a reader would then use as a count, an index or a
    seed of another type than the writer's. Every schema dpaudit validates against is read through this one."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    strict = base.TYPE_CHECKER.redefine("integer", lambda _, x: isinstance(x, int) and not isinstance(x, bool))
    return jsonschema.validators.extend(base, type_checker=strict)(schema)


def hf_model(model, what: str) -> None:
    """Refuse, in one line, an argument that is not a Hugging Face model (``what``: the function asking)."""
    if not hasattr(model, "config") or not callable(getattr(model, "get_input_embeddings", None)):
        raise DpauditError(f"{what} needs a Hugging Face model (a PreTrainedModel with its config), got "
                           f"{type(model).__name__}")


def hf_tokenizer(tokenizer, what: str) -> None:
    """Refuse, in one line, an argument that is not a Hugging Face tokenizer."""
    if not callable(tokenizer) or not hasattr(tokenizer, "get_vocab"):
        raise DpauditError(f"{what} needs the model's Hugging Face tokenizer, got {type(tokenizer).__name__}")

