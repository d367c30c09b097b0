"""``dpaudit check REPORT --checkpoint CKPT --rescore``: the report's attack scores recomputed from the model.

``--checkpoint`` alone re-derives everything a report decides from its folder and the report's attack scores
(dpaudit/gate/rederive.py); the scores themselves need the model, so a consistently forged set of them (a leaking
model's scores replaced by a quiet one's) passed it. With ``--rescore`` the score step runs again on the checkpoint for
every shipped attack whose score reads only the model, the canary and its framing (:data:`MODEL_ONLY`; and
``reference`` where the report records that the checkpoint's own base model calibrated it), and each
audit unit's score must equal the report's to float rounding (:data:`RTOL`, :data:`ATOL`: the same model on another
device or batch size). ``exposure`` is rescored against the references its section records (sampled, or the
whole space), its canaries' and references' log-perplexities compared too. The other attacks (``reference``
calibrated by a model given to ``evaluate``, or in a report that predates the record of it; a registered attack) are
named as taken from the report. The task metrics are measured again too (dpaudit/evaluation/rescore_metrics.py).
Needs the training install (torch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit.errors import DpauditError

# the shipped attacks whose score is a function of the model, the canary text and its framing only
MODEL_ONLY = ("loss", "zlib", "min_k", "min_k_plus", "final_weights", "final_weights_norm")
RTOL, ATOL = 1e-3, 1e-4  # float rounding of one model on another device, dtype path or batch size


def mismatches(report: dict, ckpt: Path) -> tuple[list[str], list[str], list[str]]:
    """(what differs, the attacks rescored, the attacks taken from the report) for the evaluation ``report`` of the
    checkpoint folder ``ckpt``. The folder is read as ``check --checkpoint`` reads it (its hash is compared there)."""
    from dpaudit import checkpoint, options
    from dpaudit.evaluation import evidence, scoring
    from dpaudit.evaluation.options import EvalOptions

    if report.get("kind") == "evaluation" and isinstance(report.get("posthoc"), dict):
        from dpaudit.evaluation import posthoc_rescore

        got, out = posthoc_rescore.loss_scores(report, Path(ckpt))  # its units from the files the report names
        if got is None:
            return out, [], ["loss"]
        return out + _differ("loss scores", ((report.get("attacks") or {}).get("loss") or {}).get("scores"), got,
                             "audit unit"), ["loss"], []
    if report.get("kind") != "evaluation":
        raise DpauditError("--rescore recomputes the attack scores of one evaluation; check each variant's report "
                           "with its checkpoint")
    if report["checkpoint"].get("path") is None:
        raise DpauditError("--rescore needs a report `dpaudit evaluate` made from the checkpoint folder: one made "
                           "through the Python API does not record the context its scores were read at; evaluate the "
                           "folder (`dpaudit evaluate CKPT --out REPORT_DIR`) and check that report")
    attacks = report.get("attacks") or {}
    black_box = [a for a in attacks if not a.startswith("whitebox")]
    own_reference = report["checkpoint"].get("reference_model") == "base"  # calibrated by the folder's own base
    expo = report.get("exposure") if isinstance(report.get("exposure"), dict) else {}
    expo_known = isinstance(expo.get("canaries"), list) and isinstance(expo.get("enumerated"), bool) \
        and isinstance(expo.get("n_references"), int)  # the references it ranked against: sampled, or the space
    ck = checkpoint.load(Path(ckpt), report["checkpoint"].get("base_model"))
    base_rows = ck.manifest.plan.rows_from_base  # final weights subtract rows read from a base: rescored if its own
    redo = [a for a in black_box
            if ((a in MODEL_ONLY and not (base_rows and a in options.FINAL_WEIGHTS_ATTACKS and not own_reference))
                or (a == "reference" and own_reference) or (a == "exposure" and expo_known))
            and isinstance(attacks[a].get("scores"), list)]
    kept = [a for a in black_box if a not in redo]
    kept += ["exposure"] if expo and "exposure" not in redo and "exposure" not in kept else []
    task = bool((ck.run.get("task") or {}).get("name")) and bool(report.get("metrics"))
    if not redo and not task:
        return [], [], kept
    framing = (report.get("canary_plan") or {}).get("framing") or scoring.framing_of(ck)
    model, tok = ck.load_model()
    from dpaudit.evaluation import rescore_metrics

    out, measured = rescore_metrics.mismatches(report, ck, model, tok, EvalOptions().batch_size)
    done = ["task metrics"] if measured else []
    if not redo:
        return out, done, kept
    n_refs, limit = (expo["n_references"], int(expo.get("space_size") or 0) if expo["enumerated"] else 0) \
        if "exposure" in redo else (0, 0)
    settings = scoring.ScoringSettings(tuple(redo), EvalOptions().batch_size, ck.context_len, None, n_refs, limit,
                                       framing)
    scored = scoring.score(ck, model, tok, settings)
    missing = [a for a in redo if a != "exposure" and a not in scored.scores]
    if missing:  # the folder cannot give them now (the score step says why): the report's, never a crash
        raise DpauditError(f"--rescore cannot recompute {', '.join(missing)} from {ckpt}: "
                           f"{'; '.join(scored.notes) or 'the score step gave none'}; check without --rescore")
    units = evidence.per_audit_unit(ck.manifest, scored.scores)
    out += [d for a in redo for d in _differ(f"{a} scores", attacks[a]["scores"], units[a], "audit unit")]
    if "exposure" in redo and scored.exposure is not None:  # the section's own numbers, canary by canary
        out += _differ("exposure canaries' log-perplexities", [c.get("log_perplexity_bits") for c in expo["canaries"]],
                       scored.exposure.canary_bits, "canary")
        if isinstance(expo.get("reference_log_perplexity_bits"), list):
            want = expo["reference_log_perplexity_bits"]
            out += _differ("exposure references' log-perplexities", want, scored.exposure.reference_bits[:len(want)],
                           "reference")
    return out, redo + done, kept


def _differ(what: str, want, got, unit: str) -> list[str]:
    """One line when the report's values ``want`` are not the model's ``got`` beyond float rounding; [] otherwise."""
    try:
        want = np.asarray(want, dtype=float)
    except (TypeError, ValueError):
        return [f"the report's {what} are not numbers"]
    got = np.asarray(got, dtype=float)
    if want.shape != got.shape:
        return [f"the report holds {want.size} {what} where the model gives {got.size}"]
    off = ~np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
    if not off.any():
        return []
    i = int(np.argmax(np.where(off, np.abs(got - want), -1.0)))
    return [f"{int(off.sum())} of the report's {want.size} {what} are not the model's ({unit} {i}: the report says "
            f"{want[i]:.6g}, the model gives {got[i]:.6g})"]
