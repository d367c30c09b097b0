"""``dpaudit check REPORT --checkpoint CKPT``: what a report says about its model, re-derived from the model's own
folder instead of trusted from the JSON (docs/security.md).

A report's JSON can be edited consistently (claim and accounting rows together, an off-plan evaluation relabelled
"as planned"); its digests cannot stop someone who rewrites every field. Given the checkpoint, the gate
re-derives from it: the content hash (the bytes loaded: weights, tokenizer, card, manifest, an adapter's base), the
claim and mechanism from the privacy card, the accounting check (every accountant, recomputed), the manifest's
digest against the card's, the evaluation plan fixed in the manifest against the one the report says it used, and
the evidence: the evaluation's audit step run again on the report's attack scores and the folder's white-box
records (which need no model), every section it decides compared with the report's (the exposure section from its
log-perplexities: rederive_exposure.py), and the verdict judged again from it and the accounting. The attack scores themselves are not recomputed (that is a new evaluation: ``dpaudit evaluate`` then
``dpaudit compare``); the report says which parts were re-derived. A post-hoc audit (``dpaudit audit identifiers``
or ``split``: no canaries.json) is re-derived on units rebuilt from the report, its ``posthoc`` section from its
kind (rederive_posthoc.py); the files its units came from are read again only by ``--rescore``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from dpaudit.claim import verdict as rule
from dpaudit.errors import DpauditError
from dpaudit.gate.differences import MISSING, described, differences

if TYPE_CHECKING:
    from dpaudit.claim.reaccount import ClaimAccounting


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)


def mismatches(report: dict, ckpt: Path) -> list[str]:
    """Every way ``report`` differs from what its checkpoint gives; [] when all re-derived parts agree."""
    from dpaudit import checkpoint
    from dpaudit.canaries import plan as eval_plan
    from dpaudit.claim.reaccount import reaccount
    from dpaudit.report import build as report_build

    if report.get("kind") != "evaluation":
        raise DpauditError("--checkpoint re-derives one evaluation report; for a run's comparison, check each "
                           "variant's VARIANT/report/report.json with its VARIANT/checkpoint")
    posthoc = isinstance(report.get("posthoc"), dict)  # no canaries.json: its units came from the stated files
    if posthoc:
        from dpaudit.evaluation import posthoc as post_hoc

        if (Path(ckpt) / "canaries.json").exists():
            raise DpauditError(f"the report is a post-hoc audit but {ckpt} has planted canaries (canaries.json): "
                               "it was not made from this folder; check the report `dpaudit evaluate` wrote")
        try:
            units = post_hoc.units_from_report(report)
        except DpauditError as e:
            return [str(e)]
        ck = checkpoint.load(Path(ckpt), report["checkpoint"].get("base_model"), manifest=units)
    else:
        ck = checkpoint.load(Path(ckpt), report["checkpoint"].get("base_model"))  # the base it recorded, if outside
    out = []
    from_objects = report["checkpoint"].get("path") is None  # made through the Python API (dpaudit.api.evaluate)
    h = object_hash(ck) if from_objects else ck.hash()
    if report["checkpoint"].get("hash") != h:
        out.append(f"the report's checkpoint hash {report['checkpoint'].get('hash')} is not {ckpt}'s ({h}): the report "
                   "was not made from this model"
                   + ("; it was made from objects (dpaudit.api.evaluate), so the folder's model was loaded and hashed "
                      "as the API hashed them: save the very model, tokenizer, card, manifest and probe records you "
                      "evaluated into the folder (save_pretrained, card.save, manifest.save, probe.save)"
                      if from_objects else ""))
    try:
        if not posthoc:
            checkpoint.check_manifest(ck, off_plan=False)
    except DpauditError as e:
        out.append(str(e))
    out += _unbound_records(ck)
    want = report_build.claim_section(ck.card)
    for part in ("claim", "mechanism"):
        if report.get(part) != want[part]:
            keys = sorted(k for k in set(want[part]) | set(report.get(part) or {})
                          if (report.get(part) or {}).get(k) != want[part].get(k))
            out.append(f"the report's {part} ({', '.join(keys)}) is not the privacy card's")
    from dpaudit.accounting import disk_cache

    with disk_cache.bypassed():  # the re-derivation trusts nothing on disk: every interval computed here
        acct = reaccount(ck.card)
    got = report.get("accounting") or {}
    for key in ("status", "reaccounted_epsilon", "certified_epsilon", "lower_epsilon"):  # what decides, each named
        a, b = got.get(key), getattr(acct, key)
        if (a != b) if key == "status" else not _close(a, b):
            out.append(f"the report's accounting {key} {a!r} is not the card's re-derived {b!r}")
    rest = [d for d in differences(got, acct.as_dict(), "accounting")  # every other leaf: rows, reasons, tolerance
            if d[0].split("/")[1] not in ("status", "reaccounted_epsilon", "certified_epsilon", "lower_epsilon")]
    if rest:
        out.append(f"the report's accounting is not the one re-derived from the card ({described(rest)})")
    out += _evidence(report, ck, acct, design=report["posthoc"].get("kind") if posthoc else None)
    if posthoc:
        from dpaudit.gate import rederive_posthoc

        out += rederive_posthoc.mismatches(report, ck)
    plan = ck.manifest.plan.evaluation  # a post-hoc audit's: its command's, rebuilt with its units
    entry = report.get("audit_plan") or {}
    if plan is not None:
        planned = eval_plan._norm(plan)
        if entry.get("planned") != planned:
            out.append("the report's planned evaluation is not the one the manifest fixed before training")
        used = entry.get("used")
        if isinstance(used, dict):
            try:
                departs = eval_plan._norm(used) != planned
            except (KeyError, TypeError, ValueError):
                departs = True
            if departs and entry.get("status") != "off-plan":
                out.append(f"the report says its evaluation was {entry.get('status')!r} but what it used departs from "
                           "the manifest's plan: it is exploratory (off-plan)")
    return out


def object_hash(ck) -> str:
    """The hash ``dpaudit.api.evaluate`` gives a model held as objects, of the model loaded from folder ``ck``
    (its weights' bytes by parameter name, the card, the manifest) and the folder's white-box records: a report
    made through the Python API is bound to the folder the model was saved into."""
    from dpaudit.checkpoint import Checkpoint

    model, tok = ck.load_model()
    held = Checkpoint(path=None, card=ck.card, manifest=ck.manifest, run={}, objects=(model.eval(), tok),
                      max_len=ck.max_len, whitebox_dir=ck.whitebox_dir or ck.path)
    return held.hash()


def _statuses(entries) -> list:
    """What decides in a list of mechanism or noise checks: each check's name and status (its finding's wording
    and the readings' digits are not compared)."""
    out: list = []
    for e in entries or []:
        if isinstance(e, dict) and "checks" in e:
            out.append(sorted((str(c.get("check")), str(c.get("status"))) for c in e.get("checks") or []))
        elif isinstance(e, dict):
            out.append((str(e.get("attack")), str(e.get("status"))))
    return out


def _evidence(report: dict, ck, acct: ClaimAccounting, design: str | None = None) -> list[str]:
    """The report's evidence and verdict, re-derived: the evaluation's own audit step
    (:func:`dpaudit.evaluation.evidence.gather_units`) run again on the report's attack scores (one per audit unit,
    as it keeps them) and the folder's white-box records (they need no model: dpaudit/probe/readback.py), then the
    verdict judged again (:func:`dpaudit.claim.verdict.judge`) with the re-derived accounting. Every section the
    evidence decides (:func:`dpaudit.report.build.evidence_sections`: the test rows, their best and correction,
    the limits, the noise and mechanism checks, the attacks' metrics, the canary plan's counts, the tiers) and the
    whole verdict must equal what the report holds. The scores themselves are the one part taken from the report
    (recomputing them is a new evaluation); a report that keeps a histogram instead (over
    ``families.RAW_SCORES_MAX`` canaries) has its test rows taken from it, and its checks and verdict re-derived."""
    from dpaudit.evaluation import evidence
    from dpaudit.gate import rederive_exposure
    from dpaudit.probe import readback
    from dpaudit.report import build as report_build

    card = ck.card
    try:
        wb = readback.whitebox(ck.whitebox_dir or ck.path, card.audited_mechanism(), card)
    except DpauditError as e:
        return [f"the folder's white-box records cannot be read back ({e})"]
    confidence, rule_name, bad = _settings(report)
    if bad:
        return [bad]
    scores = _unit_scores(report)
    if scores is None:  # histograms only: the rows as the report states them
        return _evidence_from_rows(report, ck, acct, wb, confidence)
    man = ck.manifest
    units = len(man.user_groups()[1]) if man.per_user else len(man.signs())  # the audit plan's units (its signs)
    wrong = sorted(a for a, sc in scores.items() if sc.size != units)
    if wrong:
        return [f"the report's scores of {', '.join(wrong)} are not one per audit unit of the folder's manifest "
                f"({units}): the report was not made from these canaries"]
    exposure, expo_lines = rederive_exposure.exposure_of(report, man, scores)
    ev = evidence.gather_units(card, man, scores, exposure, wb, card.audited_mechanism(), confidence, rule_name)
    want = report_build.evidence_sections(ev, confidence, man, report.get("notes") or ())
    if exposure is not None:  # its ranks and estimate from the report's log-perplexities (dpaudit/gate/rederive_exposure.py)
        want["exposure"] = ev.exposure
    if design is not None and isinstance(want.get("canary_plan"), dict):  # a post-hoc audit names its kind there
        want["canary_plan"]["design"] = design
    got = {k: report.get(k) for k in want}
    plan_said = got.get("canary_plan")
    if isinstance(plan_said, dict):  # the framing, compared below, is how the model was scored
        got["canary_plan"] = {k: v for k, v in plan_said.items() if k not in ("framing", "framing_source")}
    want["verdict"] = rule.judge(card, acct, ev.grounds(), report.get("audit_plan")).as_dict()
    got["verdict"] = report.get("verdict")
    out, decided = list(expo_lines), set()  # what decides first, each in a line of its own; then every other one
    said, derived = _statuses(got.get("mechanism_checks")), _statuses(want["mechanism_checks"])
    if said != derived:
        decided.add("mechanism_checks")
        out.append(f"the report's mechanism checks {said} are not the ones re-derived from the folder's probe "
                   f"records {derived}")
    verdict_entry = got.get("verdict")
    verdict_said = verdict_entry.get("status") if isinstance(verdict_entry, dict) else None
    if verdict_said != want["verdict"]["status"]:
        decided.add("verdict")
        out.append(f"the report's verdict {verdict_said!r} is not the one re-derived from the folder's records, the "
                   f"card's accounting and the report's scores: {want['verdict']['status']!r} "
                   f"({want['verdict']['reason'][:300]})")
    diffs = [d for d in list(differences(got, want)) + _framing(report, ck) if d[0].split("/")[0] not in decided]
    if diffs:
        out.append(f"the report's evidence is not the one re-derived from its scores, the folder's records and the "
                   f"card ({described(diffs)}): it was edited after `dpaudit evaluate` wrote it")
    return out


def _framing(report: dict, ck) -> list:
    """The canaries' framing: the checkpoint's own (dpaudit's run.json, or the tokenizer's) when the report says
    the checkpoint decided it; a framing the user stated (--canary-framing, "option") is the one thing taken as said."""
    from dpaudit.evaluation import scoring

    plan = report.get("canary_plan") or {}
    if plan.get("framing_source") == "option":
        return []
    want = {"framing": scoring.framing_of(ck, "auto"), "framing_source": "checkpoint"}
    return [(f"canary_plan/{k}", plan.get(k, MISSING), v) for k, v in want.items() if plan.get(k, MISSING) != v]


def _settings(report: dict) -> tuple[float, str, str]:
    """(confidence, threshold rule, a mismatch line or "") the evaluation used, as its plan entry records them."""
    used = (report.get("audit_plan") or {}).get("used")
    used = used if isinstance(used, dict) else {}
    confidence = used.get("confidence", (report.get("family_wise") or {}).get("confidence", 0.95))
    rule_name = used.get("rule", report.get("threshold_rule"))
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        return 0.95, "bonferroni", f"the report's evaluation confidence {confidence!r} is not a probability"
    if rule_name not in ("bonferroni", "held_out"):
        return 0.95, "bonferroni", f"the report's threshold rule {rule_name!r} is not one dpaudit applies"
    return float(confidence), str(rule_name), ""


def _unit_scores(report: dict) -> dict | None:
    """The black-box attacks' scores per audit unit as report.json keeps them (a white-box set, with its "kind",
    is re-derived from the records); None when an attack keeps a histogram instead of its scores."""
    import numpy as np

    out = {}
    for name, a in (report.get("attacks") or {}).items():
        if not isinstance(a, dict) or "kind" in a:
            continue
        if not isinstance(a.get("scores"), list):
            return None
        out[name] = np.asarray(a["scores"], dtype=float)
    return out


def _evidence_from_rows(report: dict, ck, acct: ClaimAccounting, wb, confidence: float) -> list[str]:
    """A report that keeps histograms, not scores: the mechanism and noise checks recomputed from the records and
    the verdict judged again from them, the re-derived accounting and the report's own test rows."""
    from dpaudit.audit import families
    from dpaudit.audit.rows import TestRow
    from dpaudit.probe import readback

    card = ck.card
    mech, noise = readback.mechanism_checks(wb, card), readback.noise_checks(wb, confidence)
    out = []
    derived = _statuses([e.as_dict() for e in mech])
    if _statuses(report.get("mechanism_checks")) != derived:
        out.append(f"the report's mechanism checks {_statuses(report.get('mechanism_checks'))} are not the ones "
                   f"re-derived from the folder's probe records {derived}")
    if _statuses(report.get("noise_checks")) != _statuses(noise):
        out.append("the report's noise checks are not the ones re-derived from the folder's white-box records")
    try:
        rows = [TestRow.from_dict(d) for d in report.get("empirical") or []]
    except (KeyError, TypeError, ValueError) as e:
        return out + [f"the report's test rows cannot be read ({type(e).__name__}: {e})"]
    primary = "claimed" if card.is_private else "zero"
    record_best = families.best(rows, "record_claim") if rule.record_claim(card) else None
    grounds = rule.Grounds(families.best(rows, primary), families.ceiling(rows, primary), record_best,
                           families.curve_rejection(rows), mechanism=mech, noise_checks=noise)
    want = rule.judge(card, acct, grounds, report.get("audit_plan"))
    got = (report.get("verdict") or {}).get("status")
    if got != want.status:
        out.append(f"the report's verdict {got!r} is not the one re-derived from the folder's records, the card's "
                   f"accounting and the report's own test rows: {want.status!r} ({want.reason[:300]})")
    return out


def _unbound_records(ck) -> list[str]:
    """The white-box records beside the checkpoint that its card does not name as its run's (one line each)."""
    from dpaudit.io import read_json
    from dpaudit.probe import record

    out = []
    for f in sorted(Path(ck.path).glob("gradient_canaries*.json")):
        try:
            d = read_json(f, "gradient canary record", "restore the record written with the model")
            if not isinstance(d, dict):
                raise DpauditError(f"{f}: a gradient canary record is a JSON object")
            record.check_binding(f, d, ck.card)
        except DpauditError as e:
            out.append(str(e))
    return out

