"""User-level DP fine-tuning (Chua et al. 2024), two ways on the shared engine:

* ``user_dp_sgd`` — unit = user: users Poisson-sampled, each user's gradient is the mean over k of its
  records drawn at that step (or k random chunks of its concatenated text: ``selection = "random_chunk"``;
  Alg. 2; ``user_sampling = "fixed"``: at most k records chosen once), clipped per user, Gaussian noise
  (:func:`engine.train_users`).
* ``group_privacy`` — unit = record on the capped data (each user exactly k records, users with fewer
  resampled up to k as in Alg. 1; ``user_sampling = "fixed"``: at most k, no resampling), calibrated
  to the record-level (eps/k, delta') whose group-of-k conversion is the user-level (eps, delta)
  (:func:`dpaudit.accounting.group.record_level_target`). The card claims the user-level guarantee and
  records the record-level one.

Canary users (``canaries.records_per_user > 1``) join the training users whole, through the same cap.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from dpaudit import accounting
from dpaudit.accounting import group
from dpaudit.canaries.manifest import Manifest
from dpaudit.tasks import userlm
from dpaudit.tasks.sentiment import encode_text
from dpaudit.tokens import frame_text
from dpaudit.trainers import engine, planning
from dpaudit.trainers import fit as common


def capped_users(data: userlm.UserData, manifest: Manifest, k: int, selection: str, seed: int, model=None, tok=None,
                 max_len: int = 64) -> dict[str, list[str]]:
    by_user = data.by_user()
    by_user.update(manifest.training_users())  # canary users go through the same cap as everyone
    return userlm.select(by_user, k, selection, seed, model=model, tok=tok, max_len=max_len)


def per_step_draws(tc) -> bool:
    """Whether user-wise DP-SGD draws each sampled user's k records (or chunks) anew at every step (Alg. 2): the
    paper's sampling with a random selection; a deterministic selection (longest, ...) draws the same k each time."""
    return tc.user_sampling == "paper" and tc.method == "user_dp_sgd" and tc.selection in ("random", "random_chunk")


def pad_to_k(capped: dict[str, list[str]], k: int, seed: int) -> dict[str, list[str]]:
    """Group privacy as Chua et al. prepare its data (Alg. 1, §6): a user with fewer than k records gets records of
    its own resampled (uniformly, with replacement) up to k, so every user contributes exactly k."""
    rng = np.random.default_rng([seed, 23])
    out = {}
    for u in sorted(capped):
        recs = list(capped[u])
        if len(recs) < k:
            recs += [recs[i] for i in rng.integers(0, len(recs), size=k - len(recs))]
        out[u] = recs
    return out


def fit(cfg, variant, data: userlm.UserData, manifest: Manifest, out: Path,
        snapshots=None) -> Path:
    tc, eng = variant.trainer, common.engine_config(variant)
    model, tok = common.base_model(cfg, eng, manifest)
    base_for_selection = model if tc.selection in ("high_ppl", "low_ppl") else None
    per_step = per_step_draws(tc)
    streams = None
    if per_step:  # every record of every user stays available; k are drawn at each step
        capped = data.by_user()
        capped.update(manifest.training_users())
        if tc.selection == "random_chunk":
            streams = {u: [t for text in texts for t in frame_text(tok, text)] for u, texts in capped.items()}
    else:
        capped = capped_users(data, manifest, tc.user_cap, tc.selection, eng.seed, base_for_selection, tok,
                              cfg.model.max_len)
        if tc.user_sampling == "paper" and tc.method == "group_privacy":
            capped = pad_to_k(capped, tc.user_cap, eng.seed)
    model, base = common.choose_trainable(model, tc, eng.grad_sample_mode)
    records = {u: [encode_text(t, tok, cfg.model.max_len) for t in texts] for u, texts in capped.items()}
    n_records = sum(len(v) for v in records.values())
    extra: dict = {"user_cap": tc.user_cap, "selection": tc.selection, "n_users": len(records),
                   "user_sampling": tc.user_sampling,
                   "records_per_step": (f"{tc.user_cap} {'chunks' if streams else 'records'} of each sampled user, "
                                        "drawn at every step" if per_step else "the user's records chosen once")}
    if tc.method == "user_dp_sgd" or not eng.private:
        model, res = engine.train_users(model, records, eng, tok.pad_token_id, cfg.model.max_len, snapshots=snapshots,
                                        per_step=tc.user_cap if per_step else None, streams=streams)
        user_eps, user_delta, events, grp = res.epsilon, res.delta, res.events, 1
        q_desc = "users"
    else:
        rec_eps, rec_delta, user_delta = record_target(eng, tc.user_cap, len(records))
        flat = [r for u in sorted(records) for r in records[u]]
        flat = [flat[i] for i in np.random.default_rng(eng.seed).permutation(len(flat))]
        model, res = engine.train(model, flat, dataclasses.replace(eng, target_epsilon=rec_eps, delta=rec_delta),
                                  tok.pad_token_id, cfg.model.max_len, snapshots=snapshots)
        user_eps, user_delta_achieved = group.lemma(res.epsilon, rec_delta, tc.user_cap)
        user_delta = max(user_delta, user_delta_achieved)
        events, grp = res.events, tc.user_cap
        extra["record_level"] = {"epsilon": res.epsilon, "delta": rec_delta}
        extra["conversion"] = "group privacy lemma (k eps, delta sum_{i<k} e^{i eps})"
        q_desc = "records"
    card = common.privacy_card(eng, epsilon=user_eps if eng.private else None, delta=user_delta, unit="user",
                               method=tc.method, trainable=tc.trainable, events=events, dataset_size=res.dataset_size,
                               expected_batch_size=min(eng.batch_size, res.dataset_size), group_size=grp,
                               extra={**extra, "sampled": q_desc, "n_records": n_records})
    run = common.run_record(cfg, variant, eng, res, data,
                            {"method": tc.method, "trainable": tc.trainable, "user_cap": tc.user_cap,
                             "selection": tc.selection, "user_sampling": tc.user_sampling},
                            {"n_users": len(records),
                             "n_records_available" if per_step else "n_records_after_cap": n_records})
    return common.write(out, model, tok, card, manifest, run, res, tc, base)


def record_target(eng, k: int, n_users: int) -> tuple[float, float, float]:
    """Group privacy's record-level (epsilon', delta') whose conversion to groups of k is the variant's user-level
    target, and that user-level delta (train.delta, else 1 / (2 n_users)); a record-level target below what any
    accountant states (``accounting.CALIBRATE_MIN``) refused in words of the group. ``fit``, the run's preflight and
    the dry run's plan compute it here, so all three calibrate the same noise."""
    user_delta = eng.delta if eng.delta is not None else 1.0 / (2 * n_users)
    rec_eps, rec_delta = group.record_level_target(eng.target_epsilon, user_delta, k)
    accounting.check_target_floor(rec_eps, f"group privacy of {k} records (record-level epsilon {rec_eps:.4g}): ")
    return rec_eps, rec_delta, user_delta


def preflight(cfg, variant, data: userlm.UserData, manifest: Manifest) -> None:
    """What a user-level variant would find only when it starts, found before the first variant of a run trains
    (``dpaudit.run.pipeline``): a step count past ``accounting.MAX_STEPS`` and a target epsilon no noise reaches,
    from the counts :func:`fit` will train on (users, and for group privacy their records capped at k). Counts
    only: no model, no selection (the cap keeps every user and at most k records of each)."""
    tc, eng = variant.trainer, common.engine_config(variant)
    by_user = data.by_user()
    by_user.update(manifest.training_users())
    U = len(by_user)
    if U == 0:
        return  # engine.train_users names it
    if tc.method == "user_dp_sgd" or not eng.private:  # users sampled, as engine.train_users samples them
        p = engine.users_plan(U, eng)
        if eng.private:
            accounting.check_reachable(eng.target_epsilon, p.delta, p.sample_rate, p.steps)
        return
    k = tc.user_cap  # group privacy: record-level DP-SGD on every user's capped (or padded) records, as fit trains
    n = sum(k if tc.user_sampling == "paper" else min(len(r), k) for r in by_user.values())
    rec_eps, rec_delta, _ = record_target(eng, k, U)
    plan = engine.record_plan(n, dataclasses.replace(eng, target_epsilon=rec_eps, delta=rec_delta))
    accounting.check_reachable(rec_eps, rec_delta, plan.sample_rate, plan.steps,
                               f"group privacy of {k} records (record-level epsilon {rec_eps:.4g}): ")


def user_plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of a user-wise DP-SGD variant: users sampled at B / (users + canary users), one
    Gaussian calibrated to the target over ceil(epochs / q) steps."""
    eng = variant.trainer.engine
    n_users = (users or 0) + (cfg.canaries.m if manifest is None else len(manifest.training_users()))
    B, q, steps, delta = dataclasses.astuple(engine.users_plan(n_users, eng))  # as engine.train_users
    sigma = engine.calibrated_sigma(eng, delta, q, steps) if eng.private else None  # as engine.train_users
    claim = accounting.compute([accounting.SubsampledGaussian(q, sigma, steps)], delta, eng.accountant).epsilon \
        if sigma else None  # what the card claims: the accountant's epsilon at the calibrated sigma
    return planning.MechanismPlan("user", n_users, B, q, steps, delta,
                                  f"σ = {sigma:.4g} ({eng.accountant})" if sigma else "none", claim)


def group_plan(cfg, variant, n_records: int, users: int | None, manifest) -> planning.MechanismPlan:
    """The dry run's plan of a group-privacy variant: record-level DP-SGD on every user's capped records (the
    caller counts them), calibrated to the record-level target :func:`fit` trains at, its claim converted to users
    of k (the card's claim: user-level epsilon and delta)."""
    eng, k = variant.trainer.engine, variant.trainer.user_cap
    unit = "record (claim converted to users of k)"
    if not eng.private:
        return planning.gaussian_records(eng, n_records, unit=unit)
    n_users = (users or 0) + (cfg.canaries.m if manifest is None else len(manifest.training_users()))  # as user_plan
    rec_eps, rec_delta, user_delta = record_target(eng, k, n_users)
    rec = planning.gaussian_records(dataclasses.replace(eng, target_epsilon=rec_eps, delta=rec_delta), n_records, unit)
    user_eps, delta_k = group.lemma(rec.claim, rec_delta, k)
    return dataclasses.replace(rec, delta=max(user_delta, delta_k), claim=user_eps, memory_engine=eng,
                               noise=f"{rec.noise} at record-level ε = {rec.claim:.4g}, δ = {rec_delta:.3g}")
