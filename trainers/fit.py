"""What every method module does around the engine, written once: build the base model and choose its
trainable parameters, and write the checkpoint directory (model, privacy card, canary manifest and the
``run.json`` record of how it was made)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dpaudit import checkpoint
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.report import build as report_build
from dpaudit.trainers import pretrain, trainable


def engine_config(variant):
    return variant.trainer.engine


def base_model(cfg, eng, manifest=None):
    """(model, tokenizer) the variant starts from, before its trainable parameters are chosen, on the device of
    ``eng.device`` (train.device); a new-token manifest's tokens added to both (dpaudit/canaries/new_tokens.py)."""
    from dpaudit import device
    from dpaudit.canaries import new_tokens as canary_tokens

    model, tok = pretrain.build(cfg.model)
    if manifest is not None:
        canary_tokens.add(model, tok, manifest)
    return model.to(device.resolve(eng.device, "train.device")), tok


def choose_trainable(model, tc, grad_sample_mode: str):
    """Tied embeddings handled, then the trainable axis applied: (model to train, frozen base or None)."""
    trainable.prepare_tied(model, tc.tied_embeddings, grad_sample_mode, tc.trainable)
    return trainable.apply(model, tc.trainable, tc.lora_r, tc.lora_alpha, tc.lora_targets)


def privacy_card(eng, *, epsilon: float | None, delta: float, method: str, trainable: str, unit: str = "record",
                 accountant: str | None = None, events=(), dataset_size: int | None = None,
                 expected_batch_size: float | None = None, group_size: int = 1, extra: dict | None = None,
                 engine_noise: bool = True) -> PrivacyCard:
    """The privacy card every method writes (the one card builder). A private run (``epsilon`` not None) claims
    (epsilon, delta) for ``unit`` under ``accountant`` (default: the engine's) with the mechanism ``events``;
    when its claim rests on the engine's clipped and noised updates (``engine_noise``) the card also records the
    clipping norm and where the noise came from (:func:`rng_extra`). A non-private run claims nothing, records
    no clipping and is labelled ``non_private``.
    Over 8 parameters: the card's fields by keyword (the one card builder every method calls)."""
    private = epsilon is not None
    claim = Claim(epsilon=epsilon if private else None, delta=delta if private else 0.0, unit=unit,
                  accountant=accountant or eng.accountant)
    noised = private and engine_noise
    return PrivacyCard(claim=claim, events=list(events), clipping_norm=eng.clipping_norm if noised else None,
                       expected_batch_size=expected_batch_size, dataset_size=dataset_size, group_size=group_size,
                       method=method if private else "non_private", trainable=trainable,
                       extra={**(extra or {}), **(rng_extra(eng) if noised else {})})


def intended(eng) -> dict:
    """The card's record of the epsilon a run calibrated its noise to (``extra.intended``, read by the gate: a run
    that spent more than it was trained for fails, docs/commands.md). Written by the methods whose claim is the
    calibrated target itself (dp_adam); not by those whose claim is derived from it (group privacy, composed or
    converted claims), where a claim above the target is by design."""
    return {"intended": {"epsilon": float(eng.target_epsilon),
                         "source": "train.target_epsilon (the noise multiplier calibrated to it)"}}


def sampling_extra(res) -> dict:
    """The card's record of canaries sampled at a rate of their own (``extra.sampling``): the data's rate, the
    canaries', the rate the card accounts every record at (the larger), the canary records and the divisor; empty
    when every record ran at one rate."""
    if not res.sampling:
        return {}
    return {"sampling": {**res.sampling, "note": "Poisson sampling, records and canaries each at their own rate; "
                         "the events account every record at the larger rate"}}


def rng_extra(eng) -> dict:
    """The privacy card's record of where the mechanism's randomness came from (``extra.rng``)."""
    if eng.secure_rng:
        return {"rng": {"mode": "secure", "source": "torch generators seeded from 62 bits of OS entropy, never "
                        "recorded; Opacus secure_mode Gaussian (floating-point attack fix)"}}
    return {"rng": {"mode": "seeded", "seed": eng.seed, "note": "reproducible from the published seed: anyone with "
                    "run.json can regenerate the noise; not for release (set train.secure_rng = true)"}}


def trainable_fields(tc) -> dict:
    """The trainable-axis settings every record-level method writes into run.json."""
    return {"method": tc.method, "trainable": tc.trainable, "lora_r": tc.lora_r, "lora_alpha": tc.lora_alpha,
            "lora_targets": tc.lora_targets}


def data_counts(data, records: list) -> dict:
    return {"n_train": len(data.train), "n_test": len(data.test), "n_records_with_canaries": len(records)}


def run_record(cfg, variant, eng, res, data, trainer: dict, data_counts: dict) -> dict:
    """The ``run.json`` of a checkpoint: the resolved config, trainer settings, seeds, data and what happened."""
    return {
        "variant": variant.name,
        "config": cfg.to_dict(),
        "task": dataclasses.asdict(cfg.task),
        "model": cfg.model.to_dict(),
        "trainer": {**trainer, **dataclasses.asdict(eng)},
        "seeds": {"task_split": cfg.task.seed, "canaries": cfg.canaries.seed, "train": eng.seed,
                  "model_init": cfg.model.init_seed,
                  "mechanism": "secret: OS entropy, never recorded (train.secure_rng)" if eng.secure_rng else eng.seed},
        "data": {"source": data.source, "fingerprint": data.fingerprint(), **data_counts},
        "train_result": res.summary(),
        "versions": report_build.versions(),
        "machine": report_build.machine(),
    }


def write(out: Path, model, tok, card, manifest, run: dict, res, tc, base) -> Path:
    """The checkpoint directory; a LoRA adapter keeps its base, white-box canaries their record. Under torchrun
    only rank 0 writes (every rank holds the same weights).
    Over 8 parameters: the checkpoint folder's parts, each written once; internal to the methods."""
    from dpaudit.trainers import distributed

    if not distributed.is_main():
        return Path(out)
    return checkpoint.write(out, model, tok, bind_probes(card, res), manifest, run,
                            base_model=base if tc.trainable == "lora" else None, extra_files=canary_files(res))


def bind_probes(card, res):
    """The card naming the run identity of each white-box record the run writes beside it (``extra.probe_runs``;
    docs/security.md): a record another run wrote is then refused at evaluation."""
    from dpaudit.probe import record

    sets = ([res.gradient_canaries] if res.gradient_canaries else []) + list(res.gradient_canaries_more)
    return record.bind(card, [r["probe"]["run_id"] for r in sets if (r.get("probe") or {}).get("run_id")])


def canary_files(res) -> dict:
    """The white-box canary records of a run, as checkpoint files (dpaudit/probe/record.py):
    ``gradient_canaries[_<kind>].json`` with its per-step projections and the probe's arrays beside it."""
    from dpaudit.probe.record import files

    extra = {}
    sets = ([("gradient_canaries", res.gradient_canaries)] if res.gradient_canaries else []) + \
        [(f"gradient_canaries_{more['kind']}", more) for more in res.gradient_canaries_more]
    for stem, record in sets:
        extra.update(files(record, stem))
    return extra
