"""The privacy card of a model trained with Opacus, from what its PrivacyEngine actually did.

    model, optimizer, loader = engine.make_private(module=..., optimizer=..., data_loader=...,
                                                   noise_multiplier=..., max_grad_norm=...)
    ... train ...
    card_from_opacus(engine, loader, optimizer, delta=1e-5).save("out/privacy_card.json")

* the events are the accountant's history, phase by phase (Opacus merges equal consecutive steps into
  (noise_multiplier, sample_rate, steps); heterogeneous phases compose in order);
* the sampling rate is the one Opacus accounted, ``1 / len(data_loader)`` of the loader given to
  ``make_private``, not batch / dataset size;
* the sampler is the one the loader really used: Poisson only for Opacus' ``DPDataLoader``
  (``poisson_sampling=True``, the default); a loader of fixed-size batches is recorded as ``shuffle``
  (or ``with_replacement`` / ``other``), which the claim check then reports instead of trusting;
* the claimed epsilon is what the engine's own accountant reports at ``delta`` unless one is given;
* canaries sampled at a rate of their own (:func:`dpaudit.api.sample_canaries_at_rate`) put every event at the
  larger of the two rates, and the epsilon is then accounted by dpaudit at that rate (Opacus' accountant saw the
  data's rate only); ``extra.sampling`` records both.
"""

from __future__ import annotations

from dpaudit.accounting.events import SubsampledGaussian
from dpaudit.claim.card import Claim, PrivacyCard, card_from_dict
from dpaudit.errors import DpauditError
from dpaudit.options import ACCOUNTANTS


def sampler_of(data_loader) -> str:
    """How ``data_loader`` draws its batches: poisson | shuffle | with_replacement | other."""
    from opacus.data_loader import DPDataLoader
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler
    from torch.utils.data import RandomSampler

    if isinstance(data_loader, DPDataLoader) or isinstance(getattr(data_loader, "batch_sampler", None),
                                                           UniformWithReplacementSampler):
        return "poisson"
    sampler = getattr(data_loader, "sampler", None)
    if isinstance(sampler, RandomSampler):
        return "with_replacement" if sampler.replacement else "shuffle"
    return "other"


def card_from_opacus(privacy_engine, data_loader, optimizer=None, *, delta: float, epsilon: float | None = None,
                     unit: str = "record", method: str = "opacus", trainable: str = "full",
                     dataset_size: int | None = None, intended_epsilon: float | None = None) -> PrivacyCard:
    """The card of what ``privacy_engine`` did. ``data_loader`` is the one ``make_private`` returned (it tells the
    sampler and the dataset size); ``optimizer`` the DPOptimizer it returned (clipping norm). ``epsilon`` None:
    the engine's accountant's value at ``delta``. ``intended_epsilon``: the target the run was meant to spend (the
    ``target_epsilon`` given to ``make_private_with_epsilon``): recorded as ``extra.intended``, so a run that spent
    more than intended (a bug that lowered the noise) fails the gate although its card is honest.
    Over 8 parameters: the engine, loader and optimizer, then keyword options of a public call, each documented."""
    from dpaudit import checks

    if not checks.finite(delta) or not 0 < delta < 1:
        raise DpauditError(f"card_from_opacus: delta must be in (0, 1) (a Gaussian mechanism's claim needs one; e.g. "
                           f"1e-5, below 1 / dataset size), got {delta!r}")
    if epsilon is not None and (not checks.finite(epsilon) or epsilon <= 0):
        raise DpauditError(f"card_from_opacus: epsilon must be a positive finite number (or None: the engine's "
                           f"accountant's), got {epsilon!r}")
    if intended_epsilon is not None and (not checks.finite(intended_epsilon) or intended_epsilon <= 0):
        raise DpauditError(f"card_from_opacus: intended_epsilon must be the positive finite ε the run was meant to "
                           f"spend (make_private_with_epsilon's target_epsilon), or None, got {intended_epsilon!r}")
    if not hasattr(privacy_engine, "accountant"):
        raise DpauditError(f"card_from_opacus needs the Opacus PrivacyEngine that trained the model, got "
                           f"{type(privacy_engine).__name__}")
    acc = getattr(privacy_engine, "accountant", None)
    history = list(getattr(acc, "history", None) or [])
    if not history:
        raise DpauditError("the PrivacyEngine's accountant recorded no steps; write the card after training, with "
                           "the engine that trained the model")
    if any(not sigma for sigma, _, _ in history):  # Opacus trains at noise_multiplier = 0 without a word
        raise DpauditError("the PrivacyEngine trained with noise_multiplier = 0 (no noise): the run has no DP claim; "
                           "audit it as a non-private baseline (`dpaudit card --non-private --out "
                           "privacy_card.json`, or dpaudit.claim.card.PrivacyCard(claim=Claim(epsilon=None, "
                           "delta=0.0, accountant='none')))")
    sampler = sampler_of(data_loader)
    own = canaries_own_rate(data_loader)
    top = own["canaries"] if own else 0.0  # canaries at a higher rate: every record accounted at it
    events = [SubsampledGaussian(max(float(q), top), float(sigma), int(steps), sampler) for sigma, q, steps in history]
    if dataset_size is None:
        try:
            dataset_size = len(data_loader.dataset)
        except (AttributeError, TypeError):
            dataset_size = None
    source = acc.mechanism() if acc is not None and hasattr(acc, "mechanism") else "external"
    if epsilon is None and own and any(e.sample_rate > float(q) for e, (_, q, _) in zip(events, history)):
        from dpaudit import (
            accounting,  # Opacus' accountant saw the data's rate only: the larger one, re-accounted
        )

        epsilon = accounting.compute(events, delta, source if source in ACCOUNTANTS else "prv").epsilon
        assert epsilon is not None  # compute always answers with an upper value
    elif epsilon is None:
        epsilon = float(privacy_engine.get_epsilon(delta))
    clip = getattr(optimizer, "max_grad_norm", None)
    q = events[-1].sample_rate
    card = PrivacyCard(
        claim=Claim(epsilon=float(epsilon), delta=float(delta), unit=unit, neighbouring="add_remove",
                    accountant=source if source in ACCOUNTANTS else "external"),
        events=events, clipping_norm=None if clip is None else float(clip),
        expected_batch_size=q * dataset_size if dataset_size else None, dataset_size=dataset_size,
        method=method, trainable=trainable,
        extra={"source": "opacus PrivacyEngine", "opacus_accountant": source,
               **({"intended": {"epsilon": float(intended_epsilon),
                                "source": "card_from_opacus(intended_epsilon=...)"}} if intended_epsilon is not None else {}),
               **({"probe_runs": runs} if (runs := probe_runs(optimizer)) else {}),
               **({"sampling": {**own, "accounted": events[-1].sample_rate,
                                "note": "Poisson sampling, records and canaries each at their own rate "
                                        "(dpaudit.api.sample_canaries_at_rate); the events account every record at "
                                        "the larger rate"}} if own else {})})
    return card_from_dict(card.to_dict(), "the card from the PrivacyEngine")  # the checks a reader applies


def canaries_own_rate(data_loader) -> dict | None:
    """{records, canaries, canary_records} of a loader whose canaries are sampled at a rate of their own
    (:func:`dpaudit.api.sample_canaries_at_rate`), read from its sampler; None for one rate. The canaries' rate is
    the largest rate the sampler holds, whatever the description says."""
    sampler = getattr(data_loader, "batch_sampler", None)
    rates, said = getattr(sampler, "rates", None), getattr(sampler, "sampling", None)
    if rates is None or not isinstance(said, dict):
        return None
    return {**said, "canaries": max(float(said["canaries"]), float(rates.max()))}


def probe_runs(optimizer) -> list[str]:
    """The run identities of the dpaudit probes attached to ``optimizer`` (or to the DP optimizer inside a wrapper
    such as accelerate's): the card names them, binding the probe's records to it (docs/security.md)."""
    seen: list = []
    inner = optimizer
    while inner is not None and not seen:
        seen = list(getattr(inner, "_dpaudit_probe_runs", None) or [])
        inner = getattr(inner, "optimizer", None)
    return seen

