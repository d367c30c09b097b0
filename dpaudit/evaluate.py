"""``dpaudit evaluate``: attack one checkpoint, re-account its claim, measure its task, judge it.

The flow is a data structure first, then one call: :func:`evaluate` returns the report dict (the
``report.json`` contract, :mod:`dpaudit.report`) and writes nothing; :func:`dpaudit.report.write`
renders it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from dpaudit import accounting, checkpoint
from dpaudit.accounting import group
from dpaudit.audit import exposure as exposure_stats
from dpaudit.audit import mia_metrics, one_run, selection
from dpaudit.errors import DpauditError

SCHEMA_VERSION = 1
ACCOUNTING_TOLERANCE = 0.02  # relative slack for numerical differences between accountants
DEFAULT_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus", "reference", "exposure")


def reaccount(card) -> dict:
    """Re-derive the card's epsilon with every accountant; the claim must be certified by one."""
    if not card.is_private:
        return {"results": [], "reaccounted_epsilon": None, "certified_epsilon": None,
                "tolerance": ACCOUNTING_TOLERANCE, "findings": []}
    findings = []
    if card.group_size > 1:
        res = _group_results(card)
    else:
        res = accounting.compute_all(card.events, card.claim.delta)
    for ev in card.events:
        if ev.sampler != "poisson":
            findings.append(f"batches were drawn by '{ev.sampler}' but the accountants assume Poisson sampling; "
                            "the re-accounted epsilon does not cover this mechanism")
    return {
        "results": [r.to_dict() for r in res],
        "reaccounted_epsilon": accounting.conservative(res).epsilon,  # the largest: never under-report
        "certified_epsilon": min(r.epsilon for r in res if r.delta <= card.claim.delta * (1 + 1e-9)),
        "tolerance": ACCOUNTING_TOLERANCE,
        "findings": findings,
    }


def _group_results(card) -> list:
    """User-level epsilon of a record-level mechanism on data capped at k records per user: every
    accountant's record-level epsilon through the group lemma, and the exact mixture-of-Gaussians PLD."""
    k = card.group_size
    rl = card.extra.get("record_level") if card.extra else None
    if not rl or "delta" not in rl:
        raise DpauditError("the card has group_size > 1 but no extra.record_level {epsilon, delta}; add the "
                           "record-level delta the mechanism was calibrated at")
    out = []
    for name in accounting.ACCOUNTANTS:
        e_r = accounting.compute(card.events, rl["delta"], name).epsilon
        ue, ud = group.lemma(e_r, rl["delta"], k)
        out.append(accounting.AccountingResult(f"{name}+group_lemma", ue, ud))  # certifies only if ud <= delta
    out.append(accounting.AccountingResult("pld_group_mixture",
                                           group.subsampled_gaussian_group_epsilon(card.events, card.claim.delta, k),
                                           card.claim.delta))
    return out


def _group_delta(card, reps: int) -> float:
    """delta for a group of `reps` copies of a record under the claim (group privacy lemma)."""
    if not card.is_private:
        return 0.0
    return float(min(0.999, group.lemma(card.claim.epsilon_value, card.claim.delta, reps)[1]))


def _reference_model(ck, reference: str | Path | None):
    """The reference model for calibration: an explicit path, else the checkpoint's base model."""
    from dpaudit.tasks import models

    if reference is not None:
        return models.load_dir(Path(reference))[0]
    return _base_model(ck)


def _base_model(ck):
    """The model before fine-tuning: the LoRA checkpoint's base_model/, else the model spec of run.json
    rebuilt (pretrained weights, or the seeded initialisation the trainer started from); None if neither."""
    from dpaudit.tasks import models

    if (ck.path / "base_model").exists():
        return models.load_dir(ck.path / "base_model")[0].eval()
    spec = ck.run.get("model")
    if spec:
        return models.build(models.ModelSpec(**spec))[0].eval()
    return None


def evaluate(ckpt_dir: Path, attacks=DEFAULT_ATTACKS, n_references: int = 2000, confidence: float = 0.95,
             batch_size: int = 64, command: str | None = None, progress: bool = True, rule: str = "bonferroni",
             reference: str | Path | None = None, enumerate_limit: int = 0, base_metrics: bool = False) -> dict:
    """Audit one checkpoint. ``rule`` says how the one-run audit's choices are made (see
    :mod:`dpaudit.audit.selection`); exposure ranks over the whole space when it has at most
    ``enumerate_limit`` secrets, else over ``n_references`` sampled ones. ``base_metrics`` also
    measures the task metrics of the model before fine-tuning (zero-shot for a pretrained LM), the
    reference a fine-tuning gain is read against."""
    from dpaudit.attacks import ALL
    from dpaudit.tasks.models import is_classifier

    attacks = list(dict.fromkeys(attacks))
    unknown = [a for a in attacks if a not in ALL]
    if unknown:
        raise DpauditError(f"unknown attack {unknown[0]!r}; choose from {', '.join(ALL)}")
    if not attacks:
        raise DpauditError("no attacks selected; pass e.g. --attacks loss,exposure")
    if rule not in selection.RULES:
        raise DpauditError(f"unknown threshold rule {rule!r}; choose from {', '.join(selection.RULES)}")
    t0 = time.time()
    ck = checkpoint.load(ckpt_dir)
    card, man = ck.card, ck.manifest
    acct = reaccount(card)
    model, tok = ck.load_model()
    max_len = ck.run.get("model", {}).get("max_len", 64)
    t_load = time.time() - t0

    # ---- task metrics -------------------------------------------------------------------------
    metrics: dict = {}
    task = ck.run.get("task")
    if task and task.get("name"):
        from dpaudit.tasks import registry

        mod = registry.get(task["name"])
        data = registry.load_data(task)
        if ck.run.get("data", {}).get("fingerprint") not in (None, data.fingerprint()):
            raise DpauditError(f"the task data no longer matches the checkpoint's fingerprint "
                               f"{ck.run['data']['fingerprint']}; restore the data the model was trained on")
        metrics = {**mod.metrics(model, tok, data.test, batch_size, max_len), "source": data.source,
                   "split": "validation" if task.get("validation") else "test"}
        if base_metrics:
            base = _base_model(ck)
            if base is None:
                raise DpauditError("base_metrics needs the model before fine-tuning: the checkpoint has no "
                                   "base_model/ and run.json no model spec; drop the option")
            metrics["base_model"] = mod.metrics(base, tok, data.test, batch_size, max_len)
            del base
    t_metrics = time.time() - t0 - t_load

    # ---- canary scores --------------------------------------------------------------------------
    signs = man.signs()
    record_reps = max([c.repetitions for c in man.canaries] + [1])
    if card.claim.unit == "record":  # a canary user is a group of records for a record-level claim
        reps = record_reps * man.plan.records_per_user
    else:  # a user-level claim covers all of one user's records, however many
        reps = 1
    texts = [c.text for c in man.canaries]
    notes: list[str] = []
    expo: dict = {}
    if is_classifier(model):
        scores = _classifier_scores(ck, model, tok, texts, attacks, batch_size, max_len, reference, notes)
    else:
        scores, expo = _lm_scores(ck, model, tok, texts, attacks, batch_size, reference, notes, n_references,
                                  enumerate_limit, confidence, card, reps, signs, progress)
    t_attacks = time.time() - t0 - t_load - t_metrics

    # ---- statistics -----------------------------------------------------------------------------
    if man.per_user:  # canary users: one score per user (mean over its records), one coin per user
        _, signs, owner = man.user_groups()
        counts = np.bincount(owner)
        scores = {a: np.bincount(owner, weights=sc) / counts for a, sc in scores.items()}
    k_pos, k_neg = man.plan.guesses
    attack_rows: dict = {}
    empirical = []
    deltas = [("claimed", _group_delta(card, reps))] if card.is_private else []
    deltas.append(("zero", 0.0))
    for name, sc in scores.items():
        m = mia_metrics.compute(sc, signs, seed=0)
        attack_rows[name] = {**m.to_dict(), "roc": [list(map(float, a)) for a in mia_metrics.roc_points(sc, signs)],
                             "scores": [float(x) for x in sc]}
    wb = _whitebox(ck.path)
    n_family = (len(scores) if rule == "bonferroni" else 1) + (1 if wb else 0)
    for label, d in deltas:
        if rule == "bonferroni":
            for name, r in selection.bonferroni(scores, signs, k_pos, k_neg, d, confidence, reps,
                                                n_tests=n_family).items():
                empirical.append(_row(name, label, r, confidence, n_family))
        else:
            conf = 1 - (1 - confidence) / n_family
            name, r = selection.held_out(scores, signs, d, conf, seed=man.plan.seed, group_size=reps)
            empirical.append(_row(name, label, r, confidence, n_family))
        if wb:
            m_wb = len(wb["signs"])
            d_wb = card.claim.delta if label == "claimed" else 0.0  # one record per gradient canary
            r = one_run.audit(wb["scores"], wb["signs"], m_wb // 4, m_wb // 4, delta=d_wb,
                              confidence=1 - (1 - confidence) / n_family)
            r = replace(r, threshold_rule="white-box gradient canaries; guesses m/4 + m/4 fixed in advance")
            empirical.append(_row("whitebox_gradient", label, r, confidence, n_family))
    if wb:
        attack_rows["whitebox_gradient"] = {
            **mia_metrics.compute(wb["scores"], wb["signs"], seed=0).to_dict(),
            "roc": [list(map(float, a)) for a in mia_metrics.roc_points(wb["scores"], wb["signs"])],
            "scores": [float(x) for x in wb["scores"]], "kind": wb["kind"], "m": len(wb["signs"]),
            "signs": [int(x) for x in wb["signs"]]}
    primary = [e for e in empirical if e["delta_kind"] == ("claimed" if card.is_private else "zero")]
    best = max(primary, key=lambda e: e["epsilon_lb"]) if primary else None
    record_best = _record_level_audit(card, man, scores, signs, record_reps, k_pos, k_neg, confidence, empirical)

    verdict = judge(card, acct, best, max((e["ceiling"] for e in primary), default=0.0))
    if record_best is not None and record_best["epsilon_lb"] > card.extra["record_level"]["epsilon"]:
        verdict = {"status": "violated",
                   "reason": f"record-level lower bound {record_best['epsilon_lb']:.2f} exceeds the record-level "
                             f"claim {card.extra['record_level']['epsilon']:.3f} at {confidence:.0%} confidence"}
    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": "evaluation",
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "checkpoint": {"path": str(Path(ckpt_dir)), "hash": ck.hash(), "variant": ck.run.get("variant")},
        "claim": {"epsilon": card.claim.epsilon, "delta": card.claim.delta, "unit": card.claim.unit,
                  "neighbouring": card.claim.neighbouring, "accountant": card.claim.accountant,
                  "method": card.method, "trainable": card.trainable, "private": card.is_private},
        "mechanism": card.to_dict()["mechanism"],
        "accounting": acct,
        "empirical": empirical,
        "empirical_best": best,
        "threshold_rule": rule,
        "notes": notes,
        "attacks": attack_rows,
        "exposure": expo,
        "metrics": metrics,
        "canary_plan": {"m": man.plan.m, "inserted": int(np.sum(signs > 0)), "repetitions": record_reps,
                        "records_per_user": man.plan.records_per_user, "audit_group_size": reps,
                        "k_pos": k_pos, "k_neg": k_neg, "space_size": man.plan.space_size},
        "verdict": verdict,
        "reproducibility": {
            "command": command,
            "config": ck.run.get("config"),
            "seeds": ck.run.get("seeds"),
            "data": ck.run.get("data"),
            "train_result": ck.run.get("train_result"),
            "checkpoint_hash": ck.hash(),
            "versions": checkpoint.versions(),
            "machine": checkpoint.machine(),
        },
        "timings": {"load_s": t_load, "metrics_s": t_metrics, "attacks_s": t_attacks, "total_s": time.time() - t0},
    }
    return report


def _under_reference(ck, reference, use: list, notes: list, score):
    """``score(reference model)`` when the reference attack is requested and a reference is known; else
    None (and the attack is dropped from ``use`` with a note)."""
    if "reference" not in use:
        return None
    ref_model = _reference_model(ck, reference)
    if ref_model is None:
        notes.append("reference attack skipped: no base model known; pass --reference-model")
        use.remove("reference")
        return None
    return score(ref_model)


def _classifier_scores(ck, model, tok, texts, attacks, batch_size, max_len, reference, notes) -> dict:
    """Scores of labelled canaries against a sequence classifier (attacks/classifier.py)."""
    from dpaudit.attacks import classifier

    use = [a for a in attacks if a in classifier.NAMES]
    skipped = [a for a in attacks if a not in classifier.NAMES]
    if not use:
        raise DpauditError(f"attacks {', '.join(attacks)} need a causal LM but this checkpoint is a sequence "
                           f"classifier; use {', '.join(classifier.NAMES)}")
    if skipped:
        notes.append(f"{', '.join(skipped)} skipped: token-level attacks need a causal LM, this is a classifier")
    labels = ck.manifest.labels()
    lp = classifier.label_log_probs(model, tok, texts, labels, batch_size, max_len)
    ref_lp = _under_reference(ck, reference, use, notes,
                              lambda m: classifier.label_log_probs(m, tok, texts, labels, batch_size, max_len))
    return classifier.scores(lp, ref_lp, use)


def _lm_scores(ck, model, tok, texts, attacks, batch_size, reference, notes, n_references, enumerate_limit,
               confidence, card, reps, signs, progress) -> tuple[dict, dict]:
    """Scores of text canaries against a causal LM (black-box attacks and exposure)."""
    from dpaudit.attacks import BLACK_BOX
    from dpaudit.attacks import exposure as exposure_attack
    from dpaudit.attacks.scoring import token_features

    man = ck.manifest
    scores: dict[str, np.ndarray] = {}
    black = [a for a in attacks if a in BLACK_BOX]
    if black:
        moments = any(BLACK_BOX[a].NEEDS_MOMENTS for a in black)
        feats = token_features(model, tok, texts, batch_size=batch_size, moments=moments)
        ref_feats = _under_reference(ck, reference, black, notes,
                                     lambda m: token_features(m, tok, texts, batch_size=batch_size))
        for a in black:
            scores[a] = BLACK_BOX[a].from_features(feats, texts, reference_feats=ref_feats)
    expo: dict = {}
    if "exposure" in attacks:
        p = man.plan
        enumerate_all = 0 < p.space_size <= enumerate_limit
        if enumerate_all:
            taken = {c.secret for c in man.canaries}
            refs = [s for s in exposure_attack.enumerate_space(p.alphabet, p.length) if s not in taken]
        else:
            refs = man.reference_secrets(n_references)
        bar = tqdm(total=len(refs) + len(texts), desc="exposure", disable=not progress, leave=False)
        px_can = exposure_attack.log_perplexities(model, tok, p.prefix, [c.secret for c in man.canaries], p.suffix,
                                                  4 * batch_size, progress=bar.update)
        px_ref = exposure_attack.log_perplexities(model, tok, p.prefix, refs, p.suffix, 4 * batch_size,
                                                  progress=bar.update)
        bar.close()
        rank_exp = exposure_stats.rank_exposure(px_can, px_ref)
        extra_exp = exposure_stats.extrapolated_exposure(px_can, px_ref, p.space_size)
        scores["exposure"] = -px_can
        ins = signs > 0
        threshold = float(np.log2(len(refs) + 1) - 1)  # rank <= 2, fixed in advance
        expo = {
            "n_references": len(refs),
            "enumerated": enumerate_all,
            "space_size": p.space_size,
            "max_rank_exposure": float(np.log2(len(refs) + 1)),
            "max_exposure": float(np.log2(p.space_size)),
            "mean_inserted": float(rank_exp[ins].mean()) if ins.any() else None,
            "mean_held_out": float(rank_exp[~ins].mean()) if (~ins).any() else None,
            "mean_inserted_extrapolated": float(extra_exp[ins].mean()) if ins.any() else None,
            "rank1_inserted": int(np.sum(rank_exp[ins] >= np.log2(len(refs) + 1) - 1e-9)),
            "epsilon_lb": {
                "threshold_bits": threshold,
                "value": exposure_stats.epsilon_from_exposures(
                    rank_exp[ins], threshold, _group_delta(card, reps), confidence, group_size=reps),
                "confidence": confidence, "delta": _group_delta(card, reps), "group_size": reps,
                "ceiling": exposure_stats.epsilon_from_exposures(
                    np.full(int(ins.sum()), threshold), threshold, _group_delta(card, reps), confidence,
                    group_size=reps),
                "rule": "P_in[exposure >= x] <= e^eps 2^-x + delta, Clopper-Pearson over inserted canaries; "
                        "x fixed at rank <= 2 before scoring",
            },
            "canaries": [
                {"id": c.id, "inserted": c.inserted, "repetitions": c.repetitions, "secret": c.secret,
                 "log_perplexity_bits": float(px_can[i]), "exposure": float(rank_exp[i]),
                 "exposure_extrapolated": float(extra_exp[i])}
                for i, c in enumerate(man.canaries)
            ],
            "reference_log_perplexity_bits": [float(x) for x in px_ref[:5000]],
        }
    return scores, expo


def _whitebox(path: Path) -> dict | None:
    f = Path(path) / "gradient_canaries.json"
    if not f.exists():
        return None
    from dpaudit.card import read_json

    d = read_json(f, "gradient canary record", "")
    try:
        d["signs"], d["scores"] = np.asarray(d["signs"], dtype=int), np.asarray(d["scores"], dtype=float)
    except (KeyError, ValueError, TypeError):
        raise DpauditError(f"{f}: needs 'signs' (+1/-1) and 'scores' lists of equal length") from None
    if d["signs"].size != d["scores"].size or d["signs"].size < 2:
        raise DpauditError(f"{f}: 'signs' and 'scores' must have the same length >= 2")
    return d


def _record_level_audit(card, man, scores, signs, record_reps, k_pos, k_neg, confidence, empirical):
    """Group privacy also claims a record-level guarantee: audit it too. A canary user's records share
    one coin, so each audit unit is a group of (records per user x repetitions) records; the bound is
    divided by that group size and uses the group's delta under the record-level claim. A separate
    family (its own confidence): it tests a different claim."""
    rl = (card.extra or {}).get("record_level") if card.is_private else None
    if not rl or card.claim.unit != "user":
        return None
    g = record_reps * man.plan.records_per_user
    d = float(min(0.999, group.lemma(rl["epsilon"], rl["delta"], g)[1]))
    rows = []
    for name, r in selection.bonferroni(scores, signs, k_pos, k_neg, d, confidence, g).items():
        rows.append(_row(name, "record_claim", r, confidence, len(scores)))
    empirical.extend(rows)
    return max(rows, key=lambda e: e["epsilon_lb"]) if rows else None


def _row(attack: str, delta_kind: str, r, confidence: float, n_tests: int) -> dict:
    return {"method": "one_run", "attack": attack, "delta_kind": delta_kind, **r.to_dict(),
            "bonferroni_tests": n_tests, "family_confidence": confidence, "kind": "lower bound"}


def judge(card, acct: dict, best: dict | None, ceiling: float | None = None) -> dict:
    """consistent | violated | accounting-mismatch | inconclusive | no-claim, with the reason in words.
    ``ceiling`` is the largest bound any of the audit's tests could have given."""
    lb = best["epsilon_lb"] if best else 0.0
    if ceiling is None:
        ceiling = best["ceiling"] if best else 0.0
    conf = best["family_confidence"] if best else None
    if not card.is_private:
        return {"status": "no-claim",
                "reason": f"non-private model (no epsilon claimed); the audit proves epsilon >= {lb:.2f} "
                          f"at {conf:.0%} confidence (ceiling {ceiling:.2f})"}
    eps = card.claim.epsilon_value
    if lb > eps:
        return {"status": "violated",
                "reason": f"empirical lower bound {lb:.2f} exceeds the claimed epsilon {eps:.2f} "
                          f"at {conf:.0%} confidence"}
    cert = acct["certified_epsilon"]
    if cert is not None and eps < cert * (1 - acct["tolerance"]):
        return {"status": "accounting-mismatch",
                "reason": f"claimed epsilon {eps:.3f} is below every accountant's value (smallest {cert:.3f})"}
    if acct["findings"]:
        return {"status": "accounting-mismatch", "reason": acct["findings"][0]}
    if best is not None and ceiling <= 0.0:
        return {"status": "inconclusive",
                "reason": f"accountants re-derive epsilon <= {acct['reaccounted_epsilon']:.2f} (claim {eps:.2f}), but the "
                          f"empirical audit has no power: with m = {best['m']} canaries at delta = {best['delta']:.3g} even "
                          "perfect guesses give no bound (use more canaries, fewer repetitions or a smaller delta)"}
    return {"status": "consistent",
            "reason": f"accountants re-derive epsilon <= {acct['reaccounted_epsilon']:.2f} (claim {eps:.2f}) and the "
                      f"empirical lower bound {lb:.2f} does not exceed the claim; this audit cannot detect "
                      f"violations above its ceiling {ceiling:.2f}"}
