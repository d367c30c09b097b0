"""Record-level DP-Adam (Li et al. 2022): full fine-tuning or LoRA, Poisson sampling, Gaussian noise.

Axes of the shared engine: unit = record, parameters = all, LoRA or a classifier head, noise = Opacus'
Gaussian calibrated to the target (eps, delta). ``target_epsilon = inf`` gives the non-private baseline
on the same data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit.canaries.manifest import Manifest
from dpaudit.tasks import registry, sentiment
from dpaudit.trainers import engine, planning
from dpaudit.trainers import fit as common


def build_records(data, manifest: Manifest, tokenizer, objective: str, max_len: int, seed: int,
                  task: str = "sentiment") -> list[dict]:
    """Task records plus the inserted canaries (each repeated), shuffled with the seed."""
    mod = registry.get(task)
    recs = [mod.encode_example(e, tokenizer, objective, max_len) for e in data.train]
    if objective == "classifier":
        recs += [sentiment.encode_labelled(t, y, tokenizer, max_len) for t, y in manifest.training_labelled()]
    else:
        canaries = [sentiment.encode_text(t, tokenizer, max_len) for t in manifest.training_texts()]
        if manifest.plan.train_on == "secret":  # the final-weights design: the loss reads the secret only
            from dpaudit.canaries import new_tokens

            ids = new_tokens.token_ids(tokenizer, manifest)
            canaries = [{**r, "targets": new_tokens.secret_only(r["targets"], r["input_ids"], ids)} for r in canaries]
        recs += [{**r, "canary": True} for r in canaries]  # sampled at their own rate where the plan sets one
    order = np.random.default_rng(seed).permutation(len(recs))
    return [recs[i] for i in order]


def fit(cfg, variant, data, manifest: Manifest, out: Path,
        snapshots=None) -> Path:
    """Train one variant of a run config and write its checkpoint directory."""
    tc, eng = variant.trainer, common.engine_config(variant)
    model, tok = common.base_model(cfg, eng, manifest)
    model, base = common.choose_trainable(model, tc, eng.grad_sample_mode)
    records = build_records(data, manifest, tok, cfg.task.objective, cfg.model.max_len, eng.seed, cfg.task.name)
    model, res = engine.train(model, records, eng, tok.pad_token_id, cfg.model.max_len, snapshots=snapshots,
                              canary_rate=manifest.plan.sample_rate)
    extra = {**common.intended(eng), **common.sampling_extra(res)} if res.private else None
    card = common.privacy_card(eng, epsilon=res.epsilon if res.private else None, delta=res.delta, method="dp_adam",
                               trainable=tc.trainable, events=res.events, dataset_size=len(records),
                               expected_batch_size=res.sample_rate * len(records) if res.sampling else
                               min(eng.batch_size, len(records)), extra=extra)
    run = common.run_record(cfg, variant, eng, res, data, common.trainable_fields(tc),
                            common.data_counts(data, records))
    return common.write(out, model, tok, card, manifest, run, res, tc, base)


def plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of one variant (:mod:`.planning`): one Gaussian calibrated to the target, every record
    accounted at the larger of q and the canaries' own rate when the manifest sets one."""
    eng, rate = variant.trainer.engine, cfg.canaries.sample_rate
    return planning.gaussian_records(eng, n_records, canary_rate=None if rate is None or not eng.private
                                     else float(rate))
