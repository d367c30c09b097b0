"""The exposure section of a report, re-derived by ``dpaudit check --checkpoint`` (dpaudit/gate/rederive.py).

The section's ranks, extrapolated exposures, means and its estimate are functions of two lists the report keeps:
each canary's log-perplexity and every reference secret's (kept whole up to ``MAX_KEPT`` references). As with the
attack scores, those log-perplexities are taken from the report (``--rescore`` recomputes them from the model);
everything computed from them is computed again and must equal what the report says, and the exposure attack's
scores must be the section's own log-perplexities. A report that ranked against more references than it keeps
has its canaries' identities and memberships checked against the manifest, and its ranks taken as said.
"""

from __future__ import annotations

import numpy as np

from dpaudit.checks import finite

MAX_KEPT = 5000  # reference log-perplexities report.json keeps (dpaudit/audit/families.py, exposure_report)


def exposure_of(report: dict, man, scores: dict):
    """(the exposure scores the report's section holds, or None where the section cannot be rebuilt from them; the
    ways the section cannot be the evaluation's, one line each) for ``report`` with the folder's manifest ``man``
    and the attack scores per audit unit ``scores`` (report.json's ``attacks``).

    Args:
        report: The parsed report.json.
        man: The checkpoint's canary manifest.
        scores: Attack name -> one score per audit unit, as the report keeps them.

    Returns:
        (ExposureScores or None, lines); None with no lines when the report has no exposure section.
    """
    from dpaudit.evaluation import evidence
    from dpaudit.evaluation.scoring import ExposureScores

    expo = report.get("exposure")
    attack = "exposure" in scores
    if not expo:
        return None, (["the report has exposure scores but no exposure section"] if attack else [])
    if not isinstance(expo, dict):
        return None, ["the report's exposure section is not an object"]
    canaries, refs = expo.get("canaries"), expo.get("reference_log_perplexity_bits")
    if not isinstance(canaries, list) or len(canaries) != len(man.canaries) \
            or not all(isinstance(c, dict) and finite(c.get("log_perplexity_bits")) for c in canaries):
        return None, [f"the report's exposure canaries are not one log-perplexity per canary of the folder's manifest "
                      f"({len(man.canaries)}): the report was not made from these canaries"]
    if not isinstance(refs, list) or not refs or not all(finite(x) for x in refs) \
            or not all(isinstance(expo.get(k, True), bool) for k in ("enumerated", "suffix_scored")):
        return None, ["the report's exposure references are not the log-perplexities of its reference secrets"]
    bits = np.array([float(c["log_perplexity_bits"]) for c in canaries])
    out = []
    if attack:
        own = evidence.per_audit_unit(man, {"exposure": -bits})["exposure"]
        said = np.asarray(scores["exposure"], dtype=float)
        if said.shape != own.shape or not np.allclose(said, own, rtol=1e-9, atol=1e-12):
            out.append("the report's exposure attack scores are not its exposure section's log-perplexities")
    n_refs = expo.get("n_references")
    out += _references(report, expo, man, n_refs)
    if n_refs == len(refs) and len(refs) <= MAX_KEPT:
        return ExposureScores(bits, np.array([float(x) for x in refs]), bool(expo.get("enumerated", False)),
                              bool(expo.get("suffix_scored", True))), out
    if len(refs) != MAX_KEPT or isinstance(n_refs, bool) or not isinstance(n_refs, int) or n_refs <= MAX_KEPT:
        return None, out + [f"the report's exposure section ranks against {n_refs!r} references but keeps "
                            f"{len(refs)}: the evaluation keeps them all, up to {MAX_KEPT}"]
    who = [{"id": c.id, "inserted": c.inserted, "repetitions": c.repetitions, "secret": c.secret}
           for c in man.canaries]
    if [{k: c.get(k) for k in ("id", "inserted", "repetitions", "secret")} for c in canaries] != who:
        out.append("the report's exposure canaries are not the folder's manifest's (ids, memberships, secrets)")
    return None, out


def _references(report: dict, expo: dict, man, n_refs) -> list[str]:
    """A line when the references the section says it ranked against are not the ones its evaluation draws: the
    whole space (a template's, the canaries' secrets left out, the secret's tokens alone scored) or as many sampled
    secrets as its plan entry says it used."""
    used = (report.get("audit_plan") or {}).get("used")
    want = used.get("n_references") if isinstance(used, dict) else None
    space = man.plan.space_size
    others = space - len({c.secret for c in man.canaries}) if isinstance(space, int) else None
    if isinstance(want, int) and others is not None:
        want = min(want, others)  # a space smaller than asked: every other secret (Manifest.reference_secrets)
    if expo.get("enumerated", False):
        if man.plan.design != "template" or expo.get("suffix_scored", True) or n_refs != others:
            return [f"the report's exposure section says it ranked over the whole space, which is not what its "
                    f"{n_refs!r} references, its scoring and its design ({man.plan.design}) give"]
        return []
    if expo.get("suffix_scored", True) is not True or (isinstance(want, int) and n_refs != want):
        return [f"the report's exposure section is not a ranking among the {want!r} sampled references its "
                f"evaluation used (it says {n_refs!r}, suffix scored {expo.get('suffix_scored', True)!r})"]
    return []

