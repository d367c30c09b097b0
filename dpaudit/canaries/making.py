"""Making canaries before training (``dpaudit canaries new``, :func:`dpaudit.api.new_canaries`): the plan, the pool of
a token design (:mod:`dpaudit.canaries.pools`) and the manifest (:mod:`dpaudit.canaries.manifest`). Above both, so that the
manifest module never imports the pools that read it (no import circle; ``make lint`` checks)."""

from __future__ import annotations

import secrets
from dataclasses import replace

from dpaudit.canaries import plan as eval_plan
from dpaudit.canaries import pools as canary_pools
from dpaudit.canaries.manifest import (
    DEFAULT_TEMPLATE,
    POOL_DESIGNS,
    CanaryPlan,
    Manifest,
    generate,
    parse_template,
)
from dpaudit.errors import DpauditError


def new(m: int, repetitions: int = 1, seed: int | None = None, template: str = DEFAULT_TEMPLATE,
        alphabet: str = "0123456789", length: int = 6, guess_fraction: float = 0.5, labels: int = 0, *,
        attacks=None, rule: str = "bonferroni", confidence: float = 0.95, n_references: int = 2000,
        plan: bool = True, design: str = "template", pool: int = 0, tokenizer=None, base_model=None,
        init: str = "seeded", random_prefix: int = 0, train_on: str = "record",
        sample_rate: float | None = None) -> Manifest:
    """Canaries for a model trained anywhere: m canaries, each inserted (``repetitions`` copies) or held out by a
    fair coin, the audit's guess counts fixed now, before training. ``seed`` None draws a fresh one from the
    operating system (recorded in the manifest, which regenerates from it). ``attacks`` (default: all), ``rule``,
    ``confidence`` and ``n_references`` are the evaluation plan fixed with them (:mod:`dpaudit.canaries.plan`;
    ``plan=False`` fixes none). ``design`` (module docstring): ``rare-token`` needs the ``base_model`` and its
    ``tokenizer``, ``bigram`` the ``tokenizer``; ``length`` then counts tokens (``pool`` words to draw from).
    A ``new-token`` manifest's tokens go into the model with ``dpaudit.api.add_canary_tokens`` before training;
    ``init``, ``random_prefix`` and ``train_on`` make the final-weights design (docs/canary_designs.md), whose
    default plan adds the ``final_weights`` score. ``sample_rate`` (None: the data's) is the rate at which a trainer
    that honours it (dpaudit's dp_adam) Poisson-samples each inserted canary record at every private step.
    Over 8 parameters: keyword options of a public call (dpaudit.api.new_canaries), one per option of `dpaudit canaries new`.

    Args:
        m: Canaries (at least 2); each inserted or held out by a fair coin.
        repetitions: Copies of each inserted canary (more than 1 makes the audit a group audit).
        seed: The seed the canaries and coins regenerate from (None: a fresh one from the operating system).
        template, alphabet, length: The template design's text and secret space.
        guess_fraction: The share of canaries the audit's guess counts are fixed at.
        labels: For a classifier, 2 (each canary gets a random label); 0 for a language model.
        attacks, rule, confidence, n_references: The evaluation plan fixed with the canaries.
        plan: False fixes no evaluation plan.
        design, pool, tokenizer, base_model: The canary design and what it draws from.
        init, random_prefix, train_on: The final-weights design's settings.
        sample_rate: The canaries' own Poisson rate (None: the data's).

    Returns:
        The :class:`Manifest` (``manifest.save(folder / "canaries.json")`` before training).

    Raises:
        DpauditError: An option out of its range or a design without what it draws from, in one line.
    """
    for name, v, low in (("m", m, 2), ("repetitions", repetitions, 1), ("length", length, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise DpauditError(f"canaries: {name} must be an integer >= {low}, got {v!r}")
    if seed is None:
        seed = secrets.randbits(31)
    prefix, suffix = parse_template(template)
    cp = CanaryPlan(m=m, repetitions=repetitions, prefix=prefix, suffix=suffix, alphabet=alphabet, length=length,
                    seed=seed, guess_fraction=guess_fraction, labels=labels, design=design, pool=pool, init=init,
                    random_prefix=random_prefix, train_on=train_on, sample_rate=sample_rate)
    if plan:
        cp = replace(cp, evaluation=eval_plan.planned(attacks or eval_plan.default_attacks(cp), rule, confidence,
                                                      n_references))
    if design in POOL_DESIGNS:
        if tokenizer is None:
            raise DpauditError(f"canary design {design!r} chooses its words with the base model's tokenizer: pass "
                               "tokenizer= (and base_model= for rare-token)")
        cp = canary_pools.resolve(cp, tokenizer, base_model)
    return generate(cp)
