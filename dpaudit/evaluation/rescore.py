"""``dpaudit check REPORT --checkpoint CKPT --rescore``: the report's attack scores recomputed from the model.

``--checkpoint`` alone re-derives everything a report decides from its folder and the report's attack scores
(dpaudit/gate/rederive.py); the scores themselves need the model, so a consistently forged set of them (a leaking
model's scores replaced by a quiet one's) passed it. With ``--rescore`` the score step runs again on the checkpoint for
every shipped attack whose score reads only the model, the canary and its framing (:data:`MODEL_ONLY`; and
``reference`` where the report records that the checkpoint's own base model calibrated it), and each
audit unit's score must equal the report's to float rounding (:data:`RTOL`, :data:`ATOL`: the same model on another
device or batch size); the other attacks (``reference`` calibrated by a model given to ``evaluate``, or in a report
that predates the record of it; a registered attack; the exposure section) are named as taken from the report. Needs the training install (torch).
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
    from dpaudit import checkpoint
    from dpaudit.evaluation import evidence, scoring
    from dpaudit.evaluation.options import EvalOptions

    if report.get("kind") != "evaluation" or isinstance(report.get("posthoc"), dict):
        raise DpauditError("--rescore recomputes the attack scores of one evaluation with planted canaries; check each "
                           "variant's report with its checkpoint (a post-hoc audit's units are not in the folder)")
    if report["checkpoint"].get("path") is None:
        raise DpauditError("--rescore needs a report `dpaudit evaluate` made from the checkpoint folder: one made "
                           "through the Python API does not record the context its scores were read at; evaluate the "
                           "folder (`dpaudit evaluate CKPT --out REPORT_DIR`) and check that report")
    attacks = report.get("attacks") or {}
    black_box = [a for a in attacks if not a.startswith("whitebox")]
    own_reference = report["checkpoint"].get("reference_model") == "base"  # calibrated by the folder's own base
    redo = [a for a in black_box if (a in MODEL_ONLY or (a == "reference" and own_reference))
            and isinstance(attacks[a].get("scores"), list)]
    kept = [a for a in black_box if a not in redo]
    kept += ["exposure"] if report.get("exposure") and "exposure" not in kept else []
    if not redo:
        return [], [], kept
    ck = checkpoint.load(Path(ckpt), report["checkpoint"].get("base_model"))
    framing = (report.get("canary_plan") or {}).get("framing") or scoring.framing_of(ck)
    model, tok = ck.load_model()
    settings = scoring.ScoringSettings(tuple(redo), EvalOptions().batch_size, ck.context_len, None, 0, 0, framing)
    units = evidence.per_audit_unit(ck.manifest, scoring.score(ck, model, tok, settings).scores)
    out = []
    for a in redo:
        want, got = np.asarray(attacks[a]["scores"], dtype=float), np.asarray(units[a], dtype=float)
        if want.shape != got.shape:
            out.append(f"the report holds {want.size} {a} scores where the model's canaries give {got.size}")
            continue
        off = ~np.isclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)
        if off.any():
            i = int(np.argmax(np.abs(got - want) * off))
            out.append(f"{int(off.sum())} of the report's {want.size} {a} scores are not the model's (audit unit {i}: "
                       f"the report says {want[i]:.6g}, the model gives {got[i]:.6g})")
    return out, redo, kept
