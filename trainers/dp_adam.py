"""Record-level DP-Adam (Li et al. 2022): full fine-tuning or LoRA, Poisson sampling, Gaussian noise.

Axes of the shared engine: unit = record, parameters = all or LoRA, noise = Gaussian calibrated to
the target (eps, delta). ``target_epsilon = inf`` gives the non-private baseline on the same data.
"""

from __future__ import annotations

from pathlib import Path

from dpaudit import checkpoint
from dpaudit.canaries import Manifest
from dpaudit.card import Claim, PrivacyCard
from dpaudit.tasks import models, registry, sentiment
from dpaudit.trainers import engine, trainable


def build_records(data, manifest: Manifest, tokenizer, objective: str, max_len: int, seed: int,
                  task: str = "sentiment") -> list[dict]:
    """Task records plus the inserted canaries (each repeated), shuffled with the seed."""
    import numpy as np

    mod = registry.get(task)
    recs = [mod.encode_example(e, tokenizer, objective, max_len) for e in data.train]
    if objective == "classifier":
        recs += [sentiment.encode_labelled(t, y, tokenizer, max_len) for t, y in manifest.training_labelled()]
    else:
        recs += [sentiment.encode_text(t, tokenizer, max_len) for t in manifest.training_texts()]
    order = np.random.default_rng(seed).permutation(len(recs))
    return [recs[i] for i in order]


def fit(cfg, variant, data, manifest: Manifest, out: Path, progress: bool = True) -> Path:
    """Train one variant of a run config and write its checkpoint directory."""
    import dataclasses

    tc = variant.trainer
    eng = dataclasses.replace(tc.engine, progress=progress)
    model, tok = models.build(cfg.model)
    trainable.prepare_tied(model, tc.tied_embeddings, eng.grad_sample_mode, tc.trainable)
    model, base = trainable.apply(model, tc.trainable, tc.lora_r, tc.lora_alpha, tc.lora_targets)
    records = build_records(data, manifest, tok, cfg.task.objective, cfg.model.max_len, eng.seed, cfg.task.name)
    model, res = engine.train(model, records, eng, tok.pad_token_id, cfg.model.max_len)
    claim = Claim(epsilon=res.epsilon if res.private else None,
                  delta=res.delta if res.private else 0.0, unit="record", accountant=eng.accountant)
    card = PrivacyCard(claim=claim, events=res.events, clipping_norm=eng.clipping_norm if res.private else None,
                       expected_batch_size=min(eng.batch_size, len(records)), dataset_size=len(records),
                       group_size=1, method="dp_adam" if res.private else "non_private", trainable=tc.trainable)
    run = {
        "variant": variant.name,
        "config": cfg.to_dict(),
        "task": dataclasses.asdict(cfg.task),
        "model": cfg.model.to_dict(),
        "trainer": {"method": tc.method, "trainable": tc.trainable, "lora_r": tc.lora_r, "lora_alpha": tc.lora_alpha,
                    "lora_targets": tc.lora_targets,
                    **{k: v for k, v in dataclasses.asdict(eng).items() if k != "progress"}},
        "seeds": {"task_split": cfg.task.seed, "canaries": cfg.canaries.seed, "train": eng.seed,
                  "model_init": cfg.model.init_seed},
        "data": {"source": data.source, "fingerprint": data.fingerprint(), "n_train": len(data.train),
                 "n_test": len(data.test), "n_records_with_canaries": len(records)},
        "train_result": res.summary(),
        "versions": checkpoint.versions(),
        "machine": checkpoint.machine(),
    }
    extra = {"gradient_canaries.json": res.gradient_canaries} if res.gradient_canaries else {}
    return checkpoint.write(out, model, tok, card, manifest, run, base_model=base if tc.trainable == "lora" else None,
                            extra_files=extra)
