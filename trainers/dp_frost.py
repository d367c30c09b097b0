"""DP-FROST (Hong et al.): privately choose which partitions to train, then DP-Adam on them only.

Axes of the shared engine: unit = record; parameters = the selected partitions (the mask is the
trainable-parameter axis, :func:`dpaudit.trainers.trainable.select`), plus a new task head, always trained
(trainers/partitions.py); noise = Opacus' Gaussian. The selection (trainers/psel.py) touches the private data,
so the guarantee is the composition of both phases, written on one card as heterogeneous events:

* ComputeSigma (App. B, Alg. 2): sigma_SGD alone reaches ``[train.frost] r_eps`` x epsilon over the training steps;
  sigma_ps is then the smallest noise for K x T selection rounds that keeps the composition within epsilon.
* The selection rounds are accounted at q_ps (the paper's text) or at 1 (its Alg. 3, conservative), as
  ``[train.frost] rate_reading`` says; the card records which (``extra.frost.rate_reading``). The data is always
  sampled at q_ps.
* ``[train.frost] reselect`` = K > 1 selects again before each of K equal training segments (the paper's Table 4);
  every selection spends its rounds, and one sigma_SGD covers all training steps.
* ``random`` and ``pval`` selections are data-independent baselines: no selection cost, sigma_SGD at epsilon.

``target_epsilon = inf`` runs the same selection without noise and non-private training on its choice.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from dpaudit import accounting
from dpaudit.accounting import SubsampledGaussian
from dpaudit.canaries.manifest import Manifest
from dpaudit.claim.card import PrivacyCard
from dpaudit.errors import DpauditError
from dpaudit.tokens import model_device
from dpaudit.trainers import data as data_seam
from dpaudit.trainers import dp_adam, engine, partitions, planning, psel, trainable
from dpaudit.trainers import fit as common
from dpaudit.trainers.loss import run_choices

PGM_MICRO_BATCH = 8  # per-example gradients of all selectable partitions: memory = this x parameters


@dataclasses.dataclass(frozen=True)
class Budget:
    """The noise of both phases and the events the card will carry."""

    sigma_sgd: float | None
    sigma_ps: float
    selection_events: list
    selection_rate: float  # the rate the selection is accounted at


def compute_sigma(tc, eng, plan: engine.RecordPlan) -> Budget:
    """ComputeSigma. Data-independent selections cost nothing and train at the whole epsilon."""
    rounds = tc.frost.reselect * (1 if tc.frost.selection == "single" else tc.frost.rounds)
    rate = 1.0 if tc.frost.rate_reading == "alg3" else tc.frost.sample_rate
    if not eng.private:
        return Budget(None, 0.0, [], rate)
    if tc.frost.selection in ("random", "pval"):
        sigma = accounting.calibrate_sigma(eng.target_epsilon, plan.delta, plan.sample_rate, plan.steps,
                                           accountant=eng.accountant)
        return Budget(sigma, 0.0, [], rate)
    sigma_sgd = accounting.calibrate_sigma(tc.frost.r_eps * eng.target_epsilon, plan.delta, plan.sample_rate,
                                           plan.steps, accountant=eng.accountant)
    train_event = SubsampledGaussian(plan.sample_rate, sigma_sgd, plan.steps)
    sigma_ps = accounting.calibrate_sigma_after(eng.target_epsilon, plan.delta, [train_event], rate, rounds,
                                                accountant=eng.accountant)
    return Budget(sigma_sgd, sigma_ps, [SubsampledGaussian(rate, sigma_ps, rounds)], rate)


def preflight(cfg, variant, data, manifest: Manifest) -> None:
    """What this variant would refuse at its start, refused before the first variant of a run trains
    (``dpaudit.run.pipeline``): the record-level plan's step count and a training-phase target (the whole epsilon for
    a data-independent selection, ``r_eps`` of it otherwise) that no noise reaches; the selection's noise is
    calibrated at the start, in what the training phase leaves."""
    tc, eng = variant.trainer, common.engine_config(variant)
    n = len(data.train) + len(manifest.training_texts())
    if n == 0:
        return
    plan = engine.record_plan(n, eng)
    if eng.private:
        share = 1.0 if tc.frost.selection in ("random", "pval") else tc.frost.r_eps
        accounting.check_reachable(share * eng.target_epsilon, plan.delta, plan.sample_rate, plan.steps,
                                   f"the training phase's share {share:g} of epsilon: ")


def selection_batches(tensors, q: float, seed: int, k: int, device):
    """``sample_batches(t)`` for PSEL: round t of selection k draws a fresh Poisson sample at rate q (its own
    seeded stream), in micro-batches on ``device``."""

    def batches(t: int):
        g = torch.Generator().manual_seed(int(seed) * 1000 + 100 * k + t + 7)
        chosen = torch.nonzero(torch.rand(len(tensors), generator=g) < q).flatten()
        for start in range(0, len(chosen), PGM_MICRO_BATCH):
            idx = chosen[start:start + PGM_MICRO_BATCH]
            yield tuple(x[idx].to(device) for x in tensors.tensors)

    return batches


def select(model, tensors, choices, tc, eng, budget: Budget, k: int = 0) -> tuple[list[str], dict]:
    """(names of the parameters to train, the selection record for run.json): the chosen partitions and the
    always-trained heads."""
    t0 = time.perf_counter()
    parts = partitions.partitions(model)
    selectable, heads = partitions.split(parts)
    limit = partitions.budget(parts, tc.frost.gamma)
    if tc.frost.selection in ("random", "pval"):
        chosen = psel.baseline(selectable, limit, tc.frost.selection, model, eng.seed + k)
        record = {"rule": tc.frost.selection, "chosen": chosen}
    else:
        scfg = psel.SelectionConfig(budget=limit, rounds=1 if tc.frost.selection == "single" else tc.frost.rounds,
                                    sample_rate=tc.frost.sample_rate, sigma=budget.sigma_ps, nu=tc.frost.nu,
                                    variant=tc.frost.pgm, alpha=tc.frost.alpha, clipping_norm=tc.frost.clipping_norm,
                                    seed=eng.seed)
        device = model_device(model)
        mseed = engine.mechanism_seed(eng)  # secret under train.secure_rng
        gen = torch.Generator(device=device).manual_seed(mseed * 7919 + 13 + k)
        sel = psel.psel(psel.release(model, selection_batches(tensors, tc.frost.sample_rate, mseed, k, device),
                                     scfg, gen, choices), selectable, scfg)
        chosen, record = sel.chosen, {"rule": tc.frost.selection, **sel.to_dict()}
    if not chosen and not heads:
        raise DpauditError("the selection chose no partition (every one larger than the budget); raise [train.frost] gamma")
    keep = {p.name for p in selectable if p.name in set(chosen)} | {h.name for h in heads}
    names = [n for p in parts if p.name in keep for n in p.params]
    record.update(budget=limit, selected_params=sum(p.size for p in parts if p.name in keep),
                  total_params=sum(p.size for p in parts), heads=[h.name for h in heads],
                  seconds=time.perf_counter() - t0)
    return names, record


def fit(cfg, variant, data, manifest: Manifest, out: Path, snapshots=None) -> Path:
    """Train one DP-FROST variant of a run config and write its checkpoint directory (no snapshots: see
    :mod:`dpaudit.trainers.methods`)."""
    tc, eng = variant.trainer, common.engine_config(variant)
    model, tok = common.base_model(cfg, eng, manifest)
    trainable.prepare_tied(model, tc.tied_embeddings, eng.grad_sample_mode, "full")
    records = dp_adam.build_records(data, manifest, tok, cfg.task.objective, cfg.model.max_len, eng.seed, cfg.task.name)
    partitions.budget(partitions.partitions(model), tc.frost.gamma)  # a budget error before any work
    plan = engine.record_plan(len(records), eng)
    budget = compute_sigma(tc, eng, plan)
    tensors = data_seam.collate(records, tok.pad_token_id, cfg.model.max_len)
    choices = run_choices(records)
    segments = tc.frost.reselect
    seg_cfg = dataclasses.replace(eng, epochs=eng.epochs / segments)
    results, selections = [], []
    for k in range(segments):
        for p in model.parameters():
            p.requires_grad_(True)
        trainable.prepare_tied(model, tc.tied_embeddings, eng.grad_sample_mode, "full")
        names, record = select(model, tensors, choices, tc, eng, budget, k)
        selections.append(record)
        trainable.select(model, names)
        model, res = engine.train(model, records, seg_cfg, tok.pad_token_id, cfg.model.max_len,
                                  sigma=budget.sigma_sgd)
        results.append(res)
    res = _merge(results)
    card = _card(eng, tc, res, budget, selections, len(records))
    run = common.run_record(cfg, variant, eng, res, data,
                            {"method": tc.method, "trainable": "subset",
                             **{f"frost_{k}": v for k, v in dataclasses.asdict(tc.frost).items()},
                             "selection": selections, "sigma_ps": budget.sigma_ps, "sigma_sgd": budget.sigma_sgd},
                            common.data_counts(data, records))
    return common.write(out, model, tok, card, manifest, run, res, dataclasses.replace(tc, trainable="full"), None)


def _merge(results: list) -> engine.TrainResult:
    """One TrainResult for K training segments (same sigma and rate: one event of all their steps)."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    steps = sum(r.steps for r in results)
    events = [dataclasses.replace(first.events[0], steps=steps)] if first.private else []
    return dataclasses.replace(first, steps=steps, events=events, losses=[x for r in results for x in r.losses],
                               seconds=sum(r.seconds for r in results), epsilon=None)


def _card(eng, tc, res, budget: Budget, selections: list, n: int) -> PrivacyCard:
    extra = {"frost": {"selection": tc.frost.selection, "rate_reading": tc.frost.rate_reading,
                       "selection_rate": budget.selection_rate, "sample_rate_data": tc.frost.sample_rate,
                       "sigma_ps": budget.sigma_ps, "sigma_sgd": budget.sigma_sgd, "r_eps": tc.frost.r_eps,
                       "gamma": tc.frost.gamma, "reselect": tc.frost.reselect,
                       "chosen": [s["chosen"] for s in selections]}}
    events = budget.selection_events + res.events if res.private else []
    eps = accounting.compute(events, res.delta, eng.accountant).epsilon if res.private else None
    return common.privacy_card(eng, epsilon=eps, delta=res.delta, method="dp_frost", trainable="subset",
                               accountant=eng.accountant if res.private else "none", events=events, dataset_size=n,
                               expected_batch_size=res.sample_rate * n, extra=extra)


def plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of a DP-FROST variant: the record-level sampling plan and both phases' noise (private
    selection and DP-SGD), calibrated together to the target as :func:`fit` calibrates them."""
    tc, eng = variant.trainer, variant.trainer.engine
    p = engine.record_plan(n_records, eng)
    if not eng.private:
        return planning.MechanismPlan("record", n_records, p.batch, p.sample_rate, p.steps, p.delta, "none", None)
    b = compute_sigma(tc, eng, p)
    noise = f"σ_SGD = {b.sigma_sgd:.4g}, σ_selection = {b.sigma_ps:.4g} ({eng.accountant})" if b.sigma_sgd else "none"
    events = b.selection_events + [SubsampledGaussian(p.sample_rate, b.sigma_sgd, p.steps)]  # as _card composes them
    return planning.MechanismPlan("record", n_records, p.batch, p.sample_rate, p.steps, p.delta, noise,
                                  accounting.compute(events, p.delta, eng.accountant).epsilon)
