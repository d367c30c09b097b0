"""PMixED, phase I (Flemings et al. 2024): N LoRA adapters fine-tuned without privacy on disjoint
partitions of the users, written as a deployment folder (dpaudit/pmixed/deployment.py) with its budget.

Partitions are data-independent: a user (and every record of theirs, canary users included) goes to
partition sha256(salt:user) mod N, so adding or removing one user changes one partition, one model. Each
adapter is the shared engine's non-private LoRA training on its partition (unit = record, no noise); the
privacy is spent at prediction time and claimed on the card for one partition (add/remove one model).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from dpaudit.accounting.events import PMixedPrediction
from dpaudit.canaries.manifest import Manifest
from dpaudit.checkpoint import manifest_digest
from dpaudit.errors import DpauditError
from dpaudit.folders import staged_folder
from dpaudit.io import jsonable
from dpaudit.pmixed import deployment as dep
from dpaudit.pmixed.ledger import Ledger
from dpaudit.tasks.sentiment import encode_text
from dpaudit.trainers import engine, planning
from dpaudit.trainers import fit as common


def spec_of(cfg, variant) -> dep.PMixedSpec:
    tc, e = variant.trainer, variant.trainer.engine
    return dep.PMixedSpec(n_models=tc.pmixed.models, epsilon=e.target_epsilon, delta=e.delta, alpha=tc.pmixed.alpha,
                          queries=tc.pmixed.queries, sample_rate=tc.pmixed.sample_rate, reading=tc.pmixed.reading,
                          max_len=cfg.model.max_len)


def partitions(by_user: dict[str, list[str]], n_models: int, salt: str) -> list[dict[str, list[str]]]:
    """{user: texts} of every partition; an empty partition is an error (fewer users than models)."""
    parts: list[dict[str, list[str]]] = [{} for _ in range(n_models)]
    for user in sorted(by_user):
        parts[dep.partition_of(user, n_models, salt)][user] = by_user[user]
    empty = [k for k, p in enumerate(parts) if not p]
    if empty:
        raise DpauditError(f"PMixED partition {empty[0]} of N = {n_models} holds no user ({len(by_user)} users); "
                           "lower train.pmixed.models or raise task.n_train")
    return parts


def training_users(data, manifest: Manifest) -> dict[str, list[str]]:
    by_user = data.by_user()
    by_user.update(manifest.training_users())  # a canary's owner (its id when it has none) is a user
    return by_user


def fit(cfg, variant, data, manifest: Manifest, out: Path, snapshots=None) -> Path:
    """Train the N adapters of one PMixED variant and write its deployment folder (no snapshots: see
    :mod:`dpaudit.trainers.methods`)."""
    tc = variant.trainer
    spec = spec_of(cfg, variant)
    eng = dataclasses.replace(common.engine_config(variant), target_epsilon=float("inf"),
                              gradient_canaries=0)
    parts = partitions(training_users(data, manifest), spec.n_models, spec.partition_salt)
    out = Path(out)
    with staged_folder(out) as tmp:
        (tmp / "adapters").mkdir()
        public, tok = common.base_model(cfg, eng, manifest)
        public.save_pretrained(tmp / "base_model")
        tok.save_pretrained(tmp / "base_model")
        adapters, results = [], []
        for k, part in enumerate(parts):
            model, _ = common.choose_trainable(common.base_model(cfg, eng, manifest)[0], tc, eng.grad_sample_mode)
            records = [encode_text(t, tok, cfg.model.max_len) for u in sorted(part) for t in part[u]]
            model, res = engine.train(model, records, dataclasses.replace(eng, seed=eng.seed + k), tok.pad_token_id,
                                      cfg.model.max_len)
            name = f"adapters/p{k:02d}"
            model.save_pretrained(tmp / name)
            adapters.append(name)
            s = res.summary()
            results.append({"partition": k, "users": len(part), "records": len(records), "steps": s["steps"],
                            "seconds": s.get("seconds"), "final_loss": s.get("final_loss")})
        dep.write_spec(tmp, spec, adapters)
        Ledger.create(tmp, spec.queries)
        event = PMixedPrediction(n_models=spec.n_models, queries=spec.queries, sample_rate=spec.sample_rate,
                                 alpha=spec.alpha, per_query_rdp=spec.per_query, reading=spec.reading)
        card = common.privacy_card(eng, epsilon=spec.epsilon, delta=spec.delta, unit="partition",
                                   accountant="pmixed_paper", method="pmixed", trainable="lora", events=[event],
                                   dataset_size=spec.n_models, engine_noise=False,  # private at prediction time
                                   extra={"rdp_budget": spec.rdp_budget, "per_query_rdp": spec.per_query, "betas": list(spec.betas),
                                  "partition_rule": spec.partition_rule, "adjacency": "add/remove one partition (one model)",
                                  # §5.3: "stronger than sample-level" -- a record protected at eps_G itself
                                  "record_level": {"epsilon": spec.epsilon, "delta": spec.delta,
                                                   "source": "PMixED §5.3 (a record is a subset of one partition)"}})
        card.extra["manifest_digest"] = manifest_digest(manifest)  # canaries.json bound to the card, as a checkpoint's
        card.save(tmp / "privacy_card.json")
        manifest.save(tmp / "canaries.json")
        run = common.run_record(cfg, variant, eng, _Summary(results), data,
                                {"method": "pmixed", "trainable": tc.trainable, "lora_r": tc.lora_r,
                                 "lora_alpha": tc.lora_alpha, "lora_targets": tc.lora_targets},
                                {"n_users": sum(len(p) for p in parts), "partition_users": [len(p) for p in parts],
                                 "n_records_with_canaries": sum(r["records"] for r in results)})
        (tmp / "run.json").write_text(json.dumps(jsonable(run), indent=2, default=str) + "\n")
    return out


@dataclasses.dataclass
class _Summary:
    """The per-adapter training summaries, in the place of one training's summary in run.json."""

    adapters: list

    def summary(self) -> dict:
        return {"adapters": self.adapters, "steps": sum(a["steps"] for a in self.adapters),
                "seconds": sum(a.get("seconds", 0.0) for a in self.adapters), "private": False}


def plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of a PMixED variant: no training noise (N adapters trained without privacy); the
    privacy is spent at prediction time, T queries of N models subsampled at q."""
    eng, spec = variant.trainer.engine, spec_of(cfg, variant)
    return planning.MechanismPlan("user", users or 0, spec.n_models, spec.sample_rate, spec.queries, eng.delta,
                                  f"prediction-time (N = {spec.n_models} models, q = {spec.sample_rate:g}, "
                                  f"{spec.queries} queries)", eng.target_epsilon,
                                  memory_engine=dataclasses.replace(eng, target_epsilon=math.inf))
