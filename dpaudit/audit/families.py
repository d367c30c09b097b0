"""Step 3 of ``dpaudit evaluate`` (the audit, called by dpaudit/evaluation/evidence.py): every test family of the one-run audit, under one correction.

Pure NumPy/SciPy (no model): scores in, report rows out, nothing it is given is changed.

* **Black-box family** — one test per attack (``bonferroni``: the manifest's guess counts, every test at
  1 - alpha / n) or one test chosen on a held-out half (``held_out``); plus, when the trainer recorded
  them, the **white-box gradient canaries** (m/4 + m/4 guesses fixed in advance). All of them share one
  Bonferroni correction over n = (attacks or 1) + (1 if white-box), so the best bound of the family holds
  at the stated confidence.
* Each family is run at the claim's delta (the group delta of the canary's repetitions) and at delta = 0.
* **Record-level family** — group privacy also claims a record-level guarantee; a separate claim, so a
  separate family with its own confidence.
* **Exposure** — the Carlini et al. exposure of every canary and the bound from exposures at a threshold
  fixed in advance (rank <= 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dpaudit import options
from dpaudit.audit import exposure as exposure_stats
from dpaudit.audit import fdp, mechanism_limit, mia_metrics, one_run, selection, two_sample
from dpaudit.audit.mechanism import NONE, Audited
from dpaudit.audit.rows import TestRow


@dataclass(frozen=True)
class Plan:
    """What the audit tests, fixed before any score is seen (from the manifest and the card)."""

    signs: np.ndarray  # +1 inserted / -1 held out, one per audit unit
    k_pos: int
    k_neg: int
    group_size: int  # records per audit unit under the claim (repetitions x records per canary user)
    deltas: tuple  # ((label, delta), ...): "claimed" (group delta under the claim) and "zero"
    confidence: float
    rule: str  # selection.RULES
    seed: int  # the held-out split's seed (manifest)
    whitebox_delta: float = 0.0  # the claim's delta: one record per gradient canary
    claim_profile: tuple | None = None  # (epsilons, deltas): the claim's privacy profile, for the curve test


def per_family(confidence: float, n_families: int) -> float:
    """The confidence of each of ``n_families`` test families that can each trigger a verdict (Bonferroni), so
    that a false ``violated`` has probability at most 1 - ``confidence`` over all of them."""
    if n_families < 1:
        raise ValueError(f"need at least one family, got {n_families}")
    return 1.0 - (1.0 - confidence) / n_families


def _sets(whitebox: list[dict] | None) -> list[dict]:
    """The white-box canary sets (:func:`dpaudit.evaluation.scoring.whitebox`: each with its ``name``), or none."""
    return list(whitebox or [])


RAW_SCORES_MAX = 20_000  # above it (the probe's 10^5-canary blocks) a report keeps a histogram and a thinned ROC
ROC_POINTS_MAX = 2_000


def attack_rows(scores: dict, signs, whitebox: list[dict] | None) -> dict:
    """AUC, TPR at low FPR (with bootstrap intervals), ROC points and raw scores of every attack and of every
    white-box canary set (for more than RAW_SCORES_MAX canaries: a 20-bin histogram per class and at most
    ROC_POINTS_MAX ROC points; the metrics are computed on every score)."""
    rows = {name: _metrics(sc, signs) for name, sc in scores.items()}
    for name, sc in scores.items():  # which score is whose (the plots' histograms; a reader's own analysis)
        if len(sc) <= RAW_SCORES_MAX:
            rows[name]["signs"] = [int(x) for x in np.asarray(signs)]
    for wb in _sets(whitebox):
        rows[wb["name"]] = {**_metrics(wb["scores"], wb["signs"]), "kind": wb["kind"], "m": len(wb["signs"])}
        if len(wb["signs"]) <= RAW_SCORES_MAX:
            rows[wb["name"]]["signs"] = [int(x) for x in wb["signs"]]
    return rows


def _metrics(sc, signs) -> dict:
    sc, signs = np.asarray(sc, dtype=float), np.asarray(signs)
    out = {**mia_metrics.compute(sc, signs, seed=0).to_dict()}
    roc = [np.asarray(a, dtype=float) for a in mia_metrics.roc_points(sc, signs)]
    if sc.size <= RAW_SCORES_MAX:
        return {**out, "roc": [list(map(float, a)) for a in roc], "scores": [float(x) for x in sc]}
    n = roc[0].size
    keep = np.unique(np.r_[np.arange(min(n, ROC_POINTS_MAX // 4)),  # the low-FPR end, point by point
                           np.linspace(0, n - 1, ROC_POINTS_MAX - ROC_POINTS_MAX // 4).round().astype(int)])
    edges = np.histogram_bin_edges(sc, bins=20)
    return {**out, "roc": [list(map(float, a[keep])) for a in roc],
            "histogram": {"edges": [float(e) for e in edges],
                          "inserted": [int(c) for c in np.histogram(sc[signs > 0], bins=edges)[0]],
                          "held_out": [int(c) for c in np.histogram(sc[signs < 0], bins=edges)[0]]}}


def family_size(scores: dict, plan: Plan, whitebox: list[dict] | None) -> int:
    """The tests of the family (black-box attacks, or one chosen on a held-out half, and one per white-box set)."""
    return (len(scores) if plan.rule == "bonferroni" else 1) + len(_sets(whitebox))


def per_test(scores: dict, plan: Plan, whitebox: list[dict] | None) -> float:
    """The confidence of each test of the family (Bonferroni over :func:`family_size`)."""
    return 1 - (1 - plan.confidence) / family_size(scores, plan, whitebox)


def one_run_rows(scores: dict, plan: Plan, whitebox: list[dict] | None) -> list[TestRow]:
    """Bounds of the black-box and white-box tests (one per canary set), at every delta of the plan, one correction
    for all."""
    sets = _sets(whitebox)
    n_tests, level = family_size(scores, plan, whitebox), per_test(scores, plan, whitebox)
    rows = []
    for label, d in plan.deltas:
        if plan.rule == "bonferroni":
            for name, r in selection.bonferroni(scores, plan.signs, plan.k_pos, plan.k_neg, d, plan.confidence,
                                                plan.group_size, n_tests=n_tests).items():
                rows.append(row(name, label, r, plan.confidence, n_tests, plan))
        else:
            name, r = selection.held_out(scores, plan.signs, d, level, seed=plan.seed, group_size=plan.group_size)
            rows.append(row(name, label, r, plan.confidence, n_tests, plan))
        for wb in sets:
            k, how = whitebox_guesses(wb, plan.whitebox_delta, level)
            r = one_run.audit(wb["scores"], wb["signs"], k, k,
                              delta=plan.whitebox_delta if label == "claimed" else 0.0, confidence=level)
            stat = wb.get("statistic", "sum")
            r = replace(r, threshold_rule=f"white-box gradient canaries ({wb['kind']}, {STAT_LABEL[stat]}); guesses "
                                          f"{k} + {k} {how}")
            rows.append(row(wb["name"], label, r, plan.confidence, n_tests, plan, statistic=stat))
    return rows


def whitebox_guesses(wb: dict, delta: float, confidence: float) -> tuple[int, str]:
    """(k, how it was fixed): the guesses per side of one white-box canary set, from the card, m, the claim's
    delta and the test's confidence only (never from the scores). The per-step likelihood ratio of a private
    run takes the k whose simulated best audit of the card's mechanism shows the most; anything else m/4."""
    m = len(wb["signs"])
    if wb.get("statistic") == "likelihood_ratio" and delta > 0:
        k = mechanism_limit.best_k(m, wb["statistic_params"], delta, confidence)
        if k is not None:
            return k, "fixed before scoring from the card's mechanism (the most its simulated best audit shows)"
    return max(1, m // 4), "(m/4 each) fixed in advance"


STAT_LABEL = {"sum": "sum of the projections", "likelihood_ratio": "per-step likelihood ratio"}


def two_sample_rows(plan: Plan, whitebox: list[dict] | None, confidence: float) -> list[dict]:
    """Past thresholding (:mod:`dpaudit.audit.two_sample`): for each white-box set of a private run scored by the
    card mechanism's likelihood ratio, the two-sample test at the threshold the card's simulated mechanism fixes
    (never the scores), at ``confidence`` (the family's per-test level), with the card's median limit under it.
    Valid only for independent canaries: Dirac canaries on a block no record's gradient reaches (on the model's
    coordinates the records' gradients, and the model state they share, tie the canaries' scores together), each
    with its own coin, under the card's per-coordinate noise. Reported beside the family, never one of the
    verdict's tests."""
    out = []
    for wb in _sets(whitebox):
        if (wb.get("statistic") != "likelihood_ratio" or not plan.whitebox_delta > 0 or wb.get("kind") != "dirac"
                or (wb.get("probe") or {}).get("coordinates") != "block"):
            continue
        signs, sc = np.asarray(wb["signs"]), np.asarray(wb["scores"], dtype=float)
        n_in, n_out = int(np.sum(signs > 0)), int(np.sum(signs < 0))
        prm = wb["statistic_params"]
        p = two_sample.plan(prm["sample_rate"], prm["noise_multiplier"], prm["steps"], n_in, n_out,
                            plan.whitebox_delta, confidence)
        if p is None:
            continue
        r = two_sample.bound_at(sc[signs > 0], sc[signs < 0], p["threshold"], plan.whitebox_delta, confidence,
                                rule=f"threshold fixed before scoring from the card's mechanism (FPR {p['fpr']:g})")
        out.append({"attack": wb["name"], "method": "two_sample", **r.to_dict(), "planned_fpr": p["fpr"],
                    "mechanism_limit": p["limit"], "pool": p["pool"],
                    "kind": "lower bound if the canaries are independent (not one of the verdict's tests)"})
    return out


def record_level_rows(scores: dict, plan: Plan, group_size: int, delta: float) -> list[TestRow]:
    """The record-level claim of group privacy, tested on the same canaries: each audit unit is a group of
    ``group_size`` records (records per user x repetitions), at the group's ``delta`` under that claim."""
    return [row(name, "record_claim", r, plan.confidence, len(scores), None)
            for name, r in selection.bonferroni(scores, plan.signs, plan.k_pos, plan.k_neg, delta, plan.confidence,
                                                group_size).items()]


def best(rows: list[TestRow], delta_kind: str) -> TestRow | None:
    """The largest bound among the rows of one delta kind (None when there are none)."""
    kept = [e for e in rows if e.delta_kind == delta_kind]
    return max(kept, key=lambda e: e.epsilon_lb) if kept else None


def curve_rejection(rows: list[TestRow]) -> TestRow | None:
    """The first row of the claim's tests whose guesses reject the card's whole trade-off curve (None if none)."""
    return next((e for e in rows if e.delta_kind == "claimed" and e.claim_curve_rejected), None)


def limits(rows: list[TestRow], claimed: float, audited: Audited = NONE,
           canary_rate: float | None = None) -> list[dict]:
    """For every test of the claim (one record per audit unit): what the best possible one-run audit with the
    same canaries, guesses, confidence and analysis shows about a mechanism of exactly the claimed epsilon
    (:func:`dpaudit.audit.fdp.ideal_limit`, mu-GDP) and, when the card's mechanism is one subsampled Gaussian,
    about that mechanism itself (:func:`dpaudit.audit.mechanism_limit.limit`); the fraction of each this test
    reached. ``canary_rate``: the planted canaries ran at this rate of their own (the card's ``extra.sampling``),
    so their tests' mechanism limit is the card's Gaussian at that rate (the white-box canaries' stays the card's)."""
    best: dict = {}  # one test per canary set (same canaries and guesses): the one that reached the most
    for e in rows:
        if e.delta_kind != "claimed" or e.group_size != 1 or not e.delta > 0 or not claimed < float("inf"):
            continue
        key = (e.m, e.k_pos, e.k_neg, e.delta, e.confidence, e.attack.startswith("whitebox"))
        if key not in best or e.epsilon_lb > best[key].epsilon_lb:
            best[key] = e
    g = audited.gaussian
    ev = g.params() if g is not None and g.alone else None  # another phase (a private selection): not simulated
    out = []
    for e in best.values():
        ideal = fdp.ideal_limit(e.m, e.k_pos, e.k_neg, claimed, e.delta, e.confidence)
        est = e.gdp_epsilon_estimate
        x = {"attack": e.attack, **ideal,
             "reached_epsilon_lb": e.epsilon_lb,
             "fraction": e.epsilon_lb / ideal["epsilon_lb"] if ideal["epsilon_lb"] > 0 else None,
             "reached_gdp_epsilon_estimate": est,
             "fraction_gdp": est / ideal["gdp_epsilon_estimate"]
             if est is not None and ideal["gdp_epsilon_estimate"] else None}
        mech = None
        if ev is not None and e.k_pos == e.k_neg:
            own = canary_rate is not None and not e.attack.startswith("whitebox")
            mech = mechanism_limit.limit(e.m, e.k_pos, {**ev, "sample_rate": canary_rate} if own else ev, e.delta,
                                         e.confidence)
            if mech is not None and own:
                mech["canaries_own_rate"] = True
        if mech is not None:
            x["mechanism_limit"] = {**mech, "fraction": e.epsilon_lb / mech["epsilon_lb"]
                                    if mech["epsilon_lb"] > 0 else None}
        out.append(x)
    return out


def ceiling(rows: list[TestRow], delta_kind: str) -> float:
    """The largest bound any of those tests could have given."""
    return max((e.ceiling for e in rows if e.delta_kind == delta_kind), default=0.0)


def row(attack: str, delta_kind: str, r, confidence: float, n_tests: int, plan: Plan | None,
        statistic: str | None = None) -> TestRow:
    """One test's report row: the guesses of ``r`` (a Steinke et al. result) analysed through f-DP
    (:mod:`dpaudit.audit.fdp`), which gives ``epsilon_lb`` and ``ceiling`` (assumption-free, at the row's
    delta), the Gaussian-trade-off reading (an estimate, never used in a verdict) and, on the claim's own rows
    (one record per audit unit), whether the claim's whole trade-off curve is rejected. The Steinke et al.
    bound of the same guesses stays beside it for comparison."""
    f = fdp.audit(r.v, r.m, r.k_pos, r.k_neg, r.delta, r.confidence, r.group_size)
    curve = None
    if plan is not None and plan.claim_profile is not None and delta_kind == "claimed" and r.group_size == 1:
        eps_grid, delta_grid = plan.claim_profile
        curve = fdp.rejects_profile(r.m, r.r, r.v, eps_grid, delta_grid, confidence=r.confidence)
    return TestRow(attack=attack, tier=options.evidence_tier(attack), delta_kind=delta_kind, m=r.m, k_pos=r.k_pos,
                   k_neg=r.k_neg, r=r.r, v=r.v, delta=r.delta, confidence=r.confidence, epsilon_lb=f.epsilon_lb,
                   ceiling=f.ceiling, group_size=r.group_size, threshold_rule=r.threshold_rule,
                   steinke_epsilon_lb=r.epsilon_lb, steinke_ceiling=r.ceiling, analysis=f.analysis,
                   gdp_mu_lb=f.gdp_mu_lb, gdp_epsilon_estimate=f.gdp_epsilon_estimate, claim_curve_rejected=curve,
                   bonferroni_tests=n_tests, family_confidence=confidence, statistic=statistic)


def exposure_report(canaries: list[dict], canary_bits, reference_bits, signs, space_size: int, enumerated: bool,
                    delta: float, confidence: float, group_size: int, suffix_scored: bool = True) -> dict:
    """Exposure of every canary (``canaries``: id, inserted, repetitions, secret, in manifest order) and the
    lower bound from the inserted canaries' exposures at a threshold fixed before scoring (rank <= 2).
    Over 8 parameters: the exposure scores and the audit's numbers (space, δ, confidence, group size) of one family, each a plain value."""
    rank_exp = exposure_stats.rank_exposure(canary_bits, reference_bits)
    extra_exp = exposure_stats.extrapolated_exposure(canary_bits, reference_bits, space_size)
    n_refs = len(reference_bits)
    ins = np.asarray(signs) > 0
    threshold = float(np.log2(n_refs + 1) - 1)
    return {
        "n_references": n_refs,
        "enumerated": enumerated,
        "suffix_scored": suffix_scored,  # False: log P(secret tokens | prefix), the token trie over the whole space
        "space_size": space_size,
        "max_rank_exposure": float(np.log2(n_refs + 1)),
        "max_exposure": float(np.log2(space_size)),
        "mean_inserted": float(rank_exp[ins].mean()) if ins.any() else None,
        "mean_held_out": float(rank_exp[~ins].mean()) if (~ins).any() else None,
        "mean_inserted_extrapolated": float(extra_exp[ins].mean()) if ins.any() else None,
        "rank1_inserted": int(np.sum(rank_exp[ins] >= np.log2(n_refs + 1) - 1e-9)),
        "epsilon_lb": {
            "threshold_bits": threshold,
            "value": exposure_stats.epsilon_from_exposures(rank_exp[ins], threshold, delta, confidence,
                                                           group_size=group_size),
            "confidence": confidence, "delta": delta, "group_size": group_size,
            "ceiling": exposure_stats.epsilon_from_exposures(np.full(int(ins.sum()), threshold), threshold, delta,
                                                             confidence, group_size=group_size),
            "rule": "P_in[exposure >= x] <= e^eps 2^-x + delta, Clopper-Pearson over inserted canaries; "
                    "x fixed at rank <= 2 before scoring",
            "kind": "estimate",  # the canaries of one run are not independent trials: never in a verdict

        },
        "canaries": [{**c, "log_perplexity_bits": float(canary_bits[i]), "exposure": float(rank_exp[i]),
                      "exposure_extrapolated": float(extra_exp[i])} for i, c in enumerate(canaries)],
        "reference_log_perplexity_bits": [float(x) for x in reference_bits[:5000]],
    }
