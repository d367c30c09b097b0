"""Step 5 of an evaluation (docs/architecture.md, "The flow"): the report dict, built once and never changed.

    load ─► score ─► audit ─► judge ─► **render**

The ``report.json`` contract (:mod:`dpaudit.report.write` writes it; ``dpaudit check`` reads it) is one schema,
:data:`SCHEMA_VERSION`, whichever evaluation built it: a checkpoint's (:func:`evaluation`) or a PMixED
deployment's (:func:`deployment`, :mod:`dpaudit.pmixed.steps`), both from their steps' values, through the same
:func:`head`, evidence and canary-plan sections.
Stability rules as dp_accounting's: fields are never removed, new fields are optional, meanings never
change; an incompatible change bumps the version. No torch here.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np

from dpaudit import options, report_file
from dpaudit.audit.rows import serialise
from dpaudit.io import shown_path

SCHEMA_VERSION = report_file.SCHEMA_VERSION  # defined beside the one reader of report.json

PACKAGES = ("dpaudit", "torch", "transformers", "peft", "opacus", "dp-accounting", "numpy", "scipy", "scikit-learn")


def versions() -> dict:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def machine() -> dict:
    """Where the report was made: the host, and the CUDA device when this process uses torch and sees one (a
    number measured on a GPU says so). torch is never imported for this: a process without it used none."""
    torch = sys.modules.get("torch")
    gpu = torch.cuda.get_device_name() if torch is not None and torch.cuda.is_available() else None
    return {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count(),
            "accelerator": gpu}




def head(path: Path | None, content_hash: str, variant: str | None, card) -> dict:
    """The report's first entries: schema, kind, date, what was audited, the claim and its mechanism."""
    return {"schema_version": SCHEMA_VERSION, "kind": "evaluation",
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "checkpoint": {"path": None if path is None else shown_path(path), "hash": content_hash,
                           "variant": variant},
            **claim_section(card)}


def claim_section(card) -> dict:
    """The report's ``claim`` and ``mechanism`` entries, from the privacy card."""
    return {"claim": {"epsilon": card.claim.epsilon, "delta": card.claim.delta, "unit": card.claim.unit,
                      "neighbouring": card.claim.neighbouring, "accountant": card.claim.accountant,
                      "method": card.method, "trainable": card.trainable, "private": card.is_private,
                      "rng": (card.extra or {}).get("rng"),
                      **({"intended_epsilon": float(card.intended["epsilon"]),
                          "intended_source": str(card.intended.get("source", ""))} if card.intended else {})},
            "mechanism": card.to_dict()["mechanism"]}


def reproducibility(run: dict, content_hash: str, command: str | None) -> dict:
    """How to make this report again: the command, the run record's config, seeds and data, the versions."""
    return {"command": command, "config": run.get("config"), "seeds": run.get("seeds"), "data": run.get("data"),
            "train_result": run.get("train_result"), "checkpoint_hash": content_hash,
            "versions": versions(), "machine": machine()}


def evidence_tiers(rows: list, notes=()) -> dict:
    """Per tier of empirical evidence (dpaudit.options.TIERS): whether this audit tested it, its tests and their
    best bound on the claim's rows, or why it was not tested (a report states what it tested and what not)."""
    from dpaudit.options import TIERS, evidence_tier

    why = {"outputs only": "no outputs-only attack in the evaluation plan",
           "final weights": "the canaries own no rows of the model; the final-weights design does: docs/canary_designs.md",
           "in-run": "no probe records beside the checkpoint; attach the probe while training: docs/probe.md"}
    for n in notes:
        if str(n).startswith("final-weights scores skipped"):
            why["final weights"] = str(n)
    out = {}
    for tier in TIERS:
        mine = [e for e in rows if (e.get("tier") or evidence_tier(e["attack"])) == tier]
        claim_rows = [e for e in mine if e["delta_kind"] in ("claimed",)] or [e for e in mine if e["delta_kind"] == "zero"]
        if not mine:
            out[tier] = {"tested": False, "why": why[tier]}
            continue
        best = max(claim_rows, key=lambda e: e["epsilon_lb"])
        out[tier] = {"tested": True, "tests": sorted({e["attack"] for e in mine}), "best_epsilon_lb": best["epsilon_lb"],
                     "best_test": best["attack"], "ceiling": max(e["ceiling"] for e in claim_rows)}
    return out


def evaluation(loaded, scored, ev, verdict: dict, command: str | None) -> dict:
    """The report of one checkpoint's evaluation, from the values of its steps: ``loaded`` (the checkpoint, its
    resolved options and accounting: :class:`dpaudit.evaluation.steps.Loaded`), ``scored`` (task metrics, the
    scoring notes and the timings: :class:`dpaudit.evaluation.steps.Scored`), the evidence ``ev``
    (:class:`dpaudit.evaluation.evidence.Evidence`) and the judge's ``verdict``."""
    ck, opts, acct = loaded.ck, loaded.opts, loaded.accounting
    metrics, notes, timings = scored.metrics, scored.canaries.notes, scored.timings
    man = ck.manifest
    content_hash = ck.hash()
    top = head(ck.path, content_hash, ck.run.get("variant"), ck.card)
    base = ck.outside_base() if ck.path is not None else None
    if base is not None:  # an adapter's base outside the folder: recorded, and in the hash
        top["checkpoint"]["base_model"] = str(base)
    seeded_rows = man.plan.rows_from_base and any(a in options.FINAL_WEIGHTS_ATTACKS for a in opts.attacks)
    if "reference" in opts.attacks or seeded_rows:  # which model calibrated the reference attack or gave the seeded
        top["checkpoint"]["reference_model"] = "base" if opts.reference is None else "given"  # rows: "base" rescores
    sections = evidence_sections(ev, opts.confidence, man, notes)
    return {
        **top,
        "accounting": acct.as_dict(),
        **{k: sections[k] for k in ("empirical", "empirical_best", "family_wise", "audit_limits", "noise_checks")},
        **({"whitebox_two_sample": sections["whitebox_two_sample"]} if "whitebox_two_sample" in sections else {}),
        "mechanism_checks": sections["mechanism_checks"],
        "threshold_rule": opts.rule,
        "notes": list(notes),
        "attacks": sections["attacks"],
        "exposure": ev.exposure,
        "metrics": metrics,
        "canary_plan": canary_plan_section(man, ev, opts.framing, opts.framing_source),
        "evidence_tiers": sections["evidence_tiers"],
        "verdict": verdict,
        "reproducibility": reproducibility(ck.run, content_hash, command),
        "audit_plan": opts.plan_entry,
        "timings": timings,
    }


def evidence_sections(ev, confidence: float, man, notes=()) -> dict:
    """The report's sections that the evidence ``ev`` decides, from the scores and the white-box records alone (no
    model): the test rows, their best and correction, the limits, the noise and mechanism checks, the two-sample
    rows, the attacks' metrics and the tiers. ``dpaudit check --checkpoint`` re-derives exactly these
    (dpaudit/gate/rederive.py); the exposure section, from the report's log-perplexities, is re-derived beside them
    (dpaudit/gate/rederive_exposure.py)."""
    return {**_evidence(ev, confidence), "audit_limits": ev.limits, "noise_checks": ev.noise_checks,
            **({"whitebox_two_sample": list(ev.two_sample)} if ev.two_sample else {}),
            "mechanism_checks": [e.as_dict() for e in ev.mechanism_checks], "attacks": ev.attack_rows,
            "canary_plan": canary_plan_section(man, ev), "evidence_tiers": evidence_tiers(serialise(ev.empirical), notes)}


def canary_plan_section(man, ev, framing: str | None = None, framing_source: str | None = None) -> dict:
    """The report's ``canary_plan``: the manifest's counts, the plan's group size and guesses, the framing the
    canaries were scored with (left out when not given: the gate, which scores nothing, compares the rest) and the
    design's own settings."""
    return {**_canary_plan(man, ev),
            **({"framing": framing, "framing_source": framing_source} if framing is not None else {}),
            **({"design": man.plan.design, "score_on": man.plan.score_on,
                "pool_source": man.plan.pool_source} if man.plan.design != "template" else {}),
            **({"init": man.plan.init, "random_prefix": man.plan.random_prefix,
                "train_on": man.plan.train_on} if man.plan.owns_rows else {}),
            **({"sample_rate": man.plan.sample_rate} if man.plan.sample_rate is not None else {})}


def deployment(loaded, scored, audited, verdict: dict, section: dict, content_hash: str, command: str | None,
               timings: dict) -> dict:
    """The report of one PMixED deployment's evaluation, from the values of its steps
    (:mod:`dpaudit.pmixed.steps`: ``loaded``, ``scored``, ``audited``), the judge's ``verdict``, the deployment's
    own ``section`` (the report's ``pmixed`` entry) and ``content_hash`` (weights, card, manifest and spec)."""
    ev, card, man = audited.evidence, loaded.card, loaded.manifest
    return {
        **head(loaded.path, content_hash, loaded.run.get("variant"), card),
        "accounting": audited.accounting.as_dict(),
        **_evidence(ev, loaded.confidence),
        "audit_plan": loaded.plan_entry,
        "threshold_rule": ev.plan.rule,
        "notes": [],
        "attacks": ev.attack_rows,
        "exposure": ev.exposure,
        "metrics": scored.metrics,
        "canary_plan": _canary_plan(man, ev),
        "verdict": verdict,
        "pmixed": section,
        "reproducibility": reproducibility(loaded.run, content_hash, command),
        "timings": timings,
    }


def _evidence(ev, confidence: float) -> dict:
    """The claim's test rows, the best of them, and the family-wise confidence they were corrected to."""
    return {"empirical": serialise(ev.empirical + ev.record_rows),
            "empirical_best": None if ev.best is None else ev.best.to_dict(),
            "family_wise": {"confidence": confidence, "families": ev.n_families,
                            "per_family_confidence": ev.plan.confidence}}


def _canary_plan(man, ev) -> dict:
    """What the audit planted and guessed: the manifest's counts and the plan's group size and guesses."""
    plan = ev.plan
    return {"m": man.plan.m, "inserted": int(np.sum(plan.signs > 0)), "repetitions": ev.record_reps,
            "records_per_user": man.plan.records_per_user, "audit_group_size": plan.group_size,
            "k_pos": plan.k_pos, "k_neg": plan.k_neg, "space_size": man.plan.space_size}
