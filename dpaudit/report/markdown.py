"""REPORT.md of one evaluation, from its report dict: a summary first (verdict, claim, accounting interval, best
bound with its ceiling and the audit's limit), one compact table of bounds and one of accountants, then the
details a reader looks up (training, task metrics, attacks, canaries, reproducibility). The long readings of
every test (the f-DP and Gaussian readings, the simulated limits' parameters) are in report.json. (Over 300 lines
on purpose: one document, one renderer; every section is a small function of the report dict.)
"""

from __future__ import annotations

import json
import math

from dpaudit.markup import fenced, md_tree, percent, probability
from dpaudit.options import TASK_METRICS, current_words, evidence_tier, verdict_name
from dpaudit.report import mechanism as report_checks

LIMITATIONS = [
    "Black-box attacks on the final model give loose lower bounds: a bound far below the claim is evidence "
    "of privacy, not proof of it.",
    "The one-run audit can never certify more than its ceiling, fixed by the number of canaries and guesses.",
    "Canaries inserted several times are audited through group privacy: the bound is divided by the "
    "repetitions, which makes it looser.",
    "Re-accounting checks the mechanism written on the privacy card; it cannot see a trainer that does "
    "something other than what its card says (white-box canaries can).",
]


def fmt_eps(x) -> str:
    if x is None:
        return "∞ (no claim)"
    if isinstance(x, str):
        return x
    return f"{x:.2f}"


def summary_lines(r: dict) -> list[str]:
    """Verdict aside, what a reader needs first: the claim, the accounting interval, the best bound with its
    ceiling and how much of the audit's own limit it reached, the noise check, the plan."""
    c, a, v = r["claim"], r["accounting"], r["verdict"]
    L = []
    if c["private"]:
        L.append(f"- Claim: ε = {c['epsilon']:.4g} at δ = {probability(c['delta'], 3)} ({c['unit']} level, {c['neighbouring']} "
                 f"neighbours; accountant {c['accountant']}; method {c['method']}, {c['trainable']}).")
    else:
        L.append(f"- Claim: none (a non-private model; method {c['method']}).")
    if c.get("intended_epsilon") is not None:  # intended vs achieved (the card's extra.intended)
        spent = c["epsilon"] if c["private"] else math.inf
        ratio = spent / c["intended_epsilon"]
        L.append(f"- Intended: ε = {c['intended_epsilon']:.4g} ({c.get('intended_source') or 'the card'}); this run "
                 + (f"spent {ratio:.2f}× that: **more privacy than intended** (the default gate fails it)."
                    if ratio > 1.01 else "stays within it."))
    acc = v.get("accounting") or {}
    if a.get("lower_epsilon") is not None or a.get("certified_epsilon") is not None:
        lo = "—" if a.get("lower_epsilon") is None else f"{a['lower_epsilon']:.4g}"
        hi = "—" if a.get("certified_epsilon") is None else f"{a['certified_epsilon']:.4g}"
        interval = f"true ε of the stated mechanism in [{lo}, {hi}]"
    else:
        interval = "no accountant gives an interval"
    if acc.get("status"):
        loose = a.get("reaccounted_epsilon")
        hi = a.get("certified_epsilon")
        tail = (f"; the loosest accountant's upper value, {fmt_eps(loose)}, is a bound, not the true ε"
                if loose is not None and hi is not None and loose > hi * (1 + 1e-3) else "")
        L.append(f"- Accounting: **{acc['status']}** — {interval}{tail}.")
    emp = v.get("empirical") or {}
    best = r.get("empirical_best")
    if best:
        L.append(f"- Empirical: **{emp.get('status', '—')}** — best bound {best['epsilon_lb']:.2f} at "
                 f"{percent(best['family_confidence'])} ({best['attack']}){_limit_phrase(r, best)}; each test's own "
                 "ceiling is in the bounds table.")
    L += tier_lines(r)
    ph = r.get("posthoc")
    if ph:
        L.append(f"- Post-hoc audit ({ph['kind']}, no canaries were planted): every bound above holds **only if** "
                 f"{ph['assumption']}.")
    L += strength_lines(r)
    for n in r.get("noise_checks") or []:
        word = ("**below the card's σ**" if n["status"] == "below the card" else "no shortfall")
        L.append(f"- Noise check ({n['attack']}): at most {n['upper']:.4g} at {percent(n['confidence'])} against the card's "
                 f"σ = {n['noise_multiplier']:.4g}: {word}.")
    L += report_checks.summary_line(r)
    L += plan_lines(r)
    L += next_steps(r)
    L.append("- Neither check can prove a model private: accountants verify the mechanism written on the card, and an "
             "audit can only refute a claim, up to its ceiling.")
    return L


def tier_lines(r: dict) -> list[str]:
    """What each tier of evidence (outputs only, final weights, in-run) tested and showed, or why it was not tested
    (reports written before the tiers have none)."""
    tiers = r.get("evidence_tiers")
    if not tiers:
        return []
    parts = []
    for name, t in tiers.items():
        if t.get("tested"):
            parts.append(f"{name}: ε ≥ {t['best_epsilon_lb']:.2f} ({t['best_test']}; ceiling {t['ceiling']:.2f})")
        else:
            parts.append(f"{name}: not tested ({t['why']})")
    return ["- Evidence by tier: " + "; ".join(parts) + "."]


def claim_strength(r: dict) -> dict | None:
    """The report's audit limits at the claim: the test whose median audit of a mechanism exactly at the claimed
    epsilon shows the most (``top``), every limit, the claim and the top's share of it; None without a claim or
    limits. The report's strength line and the gate's summary read it from here."""
    c = r.get("claim") or {}
    given = r.get("audit_limits")
    lims = [x for x in (given if isinstance(given, list) else [])
            if isinstance(x, dict) and isinstance(x.get("epsilon_lb"), (int, float)) and math.isfinite(x["epsilon_lb"])]
    eps = c.get("epsilon")
    if not c.get("private") or not lims or not isinstance(eps, (int, float)) or not eps > 0:
        return None
    top = max(lims, key=lambda x: x["epsilon_lb"])
    return {"top": top, "limits": lims, "claim": float(eps), "share": top["epsilon_lb"] / float(eps)}


def strength_lines(r: dict) -> list[str]:
    """How strong the test was at the claim: what a mechanism exactly at the claimed epsilon would show, in the
    median audit with these canaries and guesses (the report's audit_limits, simulated before any score was read),
    so that a weak test never reads as a strong one."""
    s = claim_strength(r)
    if s is None:
        return []
    top, lims, eps, share = s["top"], s["limits"], s["claim"], s["share"]
    others = [f"{x['attack']} {x['epsilon_lb']:.2f}" for x in lims if x is not top]
    return [f"- Strength of the test at the claim: a mechanism exactly at ε = {eps:.3g} shows {top['epsilon_lb']:.2f} "
            f"in the median audit with these canaries ({top['attack']}, m = {top['m']}: {share:.0%} of the claim"
            + (f"; {', '.join(others)}" if others else "") + ")."]


def reach(r: dict) -> str:
    """What the audit could reach, one number beside every headline (the largest bound any of its tests could give,
    docs/verdicts.md "reach"); empty for a report without it."""
    ceiling = (r["verdict"].get("empirical") or {}).get("ceiling")
    if not isinstance(ceiling, (int, float)) or not math.isfinite(ceiling):
        return ""
    return f"the audit reaches ε {ceiling:.2f} at most"


def headline(r: dict) -> str:
    """The verdict, what the audit could reach, and why: the first line of REPORT.md and of the model card's
    section (``r``'s strings already escaped by the caller)."""
    v = r["verdict"]
    at = reach(r)
    return f"`{verdict_name(v['status'])}`" + (f" ({at})" if at else "") + f" — {v['reason']}."


# the next step each headline calls for, besides an audit too weak to reach the claim (:func:`next_steps`)
NEXT_BY_VERDICT = {
    "mechanism-mismatch": "fix the training loop: the failed checks above name what departs from the card "
                          "(docs/pitfalls.md lists the usual causes); retrain and re-evaluate. More canaries cannot "
                          "help while the card does not describe the code that ran.",
    "accounting-mismatch": "the card claims less ε than its own mechanism spends: write the claim from `dpaudit "
                           "account --card privacy_card.json` (or train with more noise), then re-evaluate.",
    "violated": "the model shows more leakage than its claim allows: do not ship it under this claim; attach the "
                "probe (docs/probe.md) to find where the loop departs from its card.",
}


def next_steps(r: dict) -> list[str]:
    """The next step the headline calls for (:data:`NEXT_BY_VERDICT`); where the audit could not reach the claim,
    ``dpaudit audit plan`` on the card's own mechanism (the command, filled in) and what the report's own limits
    already say about more canaries; where the accounting is unverifiable, how to make it checkable."""
    c, v = r["claim"], r["verdict"]
    head = verdict_name(v["status"])
    if head in NEXT_BY_VERDICT and c["private"]:
        return [f"- Next: {NEXT_BY_VERDICT[head]}"]
    emp = (v.get("empirical") or {}).get("status")
    if head == "inconclusive" and (v.get("accounting") or {}).get("status") != "verified":
        return ["- Next: make the claim checkable: `dpaudit account --card privacy_card.json` says why no "
                "accountant verifies it; a card whose mechanism the accountants read is in docs/contracts.md."]
    if not c["private"] or emp not in ("underpowered", "no-power"):
        return []
    mech = r.get("mechanism") or {}
    events = mech.get("events") or []
    out = []
    if len(events) == 1 and events[0].get("type") == "subsampled_gaussian" and mech.get("group_size", 1) == 1:
        e = events[0]
        own = [x["mechanism_limit"] for x in r.get("audit_limits") or [] if x.get("mechanism_limit")]
        now = max(own, key=lambda x: x["epsilon_lb"]) if own else None
        here = (f" (with these canaries the card's mechanism shows {now['epsilon_lb']:.2f} at m = {now['m']})"
                if now else "")
        out.append(f"- Next: `dpaudit audit plan --sample-rate {e['sample_rate']:.4g} --sigma "
                   f"{e['noise_multiplier']:.4g} --steps {e['steps']} --delta {probability(c['delta'], 3)}` prints what 1,000 to "
                   f"100,000 white-box canaries (the probe, docs/probe.md) would show on this card's mechanism{here}; "
                   "fix m before training, in the config or attach_probe(m=...).")
    else:
        out.append("- Next: more canaries (or white-box ones: docs/probe.md) raise the ceiling; `dpaudit audit plan` "
                   "prints what m white-box canaries can show on a subsampled Gaussian mechanism.")
    if emp == "underpowered":
        out.append("- Until then the claim rests on its accounting and the mechanism checks: this audit could not have "
                   "refuted it.")
    return out


def _limit_phrase(r: dict, best: dict) -> str:
    """How much of the best possible one-run audit with the same canaries the best test reached."""
    for x in r.get("audit_limits") or []:
        if x["attack"] != best["attack"]:
            continue
        if not x["epsilon_lb"] > 0:
            return ("; the best one-run audit with these canaries shows nothing at this claim (its limit is 0): "
                    "more canaries are needed")
        out = f"; {x['fraction']:.0%} of the {x['epsilon_lb']:.2f} the best one-run audit with these canaries shows"
        ml = x.get("mechanism_limit")
        if ml and ml["epsilon_lb"] > 0:
            out += f" (of the card's own mechanism: {ml['epsilon_lb']:.2f})"
        return out
    return ""


def bound_rows(r: dict) -> list[str]:
    """One row per test of the claim: the lower bound, its confidence, the ceiling, the guesses."""
    private = r["claim"]["private"]
    rows = ["| test | evidence tier | ε lower bound | confidence | ceiling | correct / guesses of m | δ | group |",
            "|---|---|---|---|---|---|---|---|"]
    pure = False
    for e in r["empirical"]:
        kind = {"record_claim": "record-level claim", "claimed": "δ claimed"}.get(e["delta_kind"], "δ = 0")
        pure = pure or (e["delta_kind"] == "zero" and private)
        rows.append(f"| {e['attack']} ({kind}) | {e.get('tier') or evidence_tier(e['attack'])} | {e['epsilon_lb']:.2f} | "
                    f"{percent(e['family_confidence'])} | "
                    f"{e['ceiling']:.2f} | {e['v']} / {e['r']} of {e['m']} | {probability(e['delta'], 3)} | {e['group_size']} |")
    ex = (r.get("exposure") or {}).get("epsilon_lb")
    if ex:
        rows.append(f"| exposure ≥ {ex['threshold_bits']:.2f} bits (an estimate, not a bound) | outputs only | "
                    f"{ex['value']:.2f} | "
                    f"{percent(ex['confidence'])} | — | — | {probability(ex['delta'], 3)} | {ex['group_size']} |")
    notes = []
    fw = r.get("family_wise")
    if fw:
        notes.append("Confidence is family-wise: Bonferroni over the tests of each family"
                     + (f", {fw['families']} families at {percent(fw['per_family_confidence'], 1)} each" if fw["families"] > 1
                        else "") + f"; {percent(fw['confidence'])} together.")
    if pure:
        notes.append("δ = 0 rows: a pure-DP bound, not comparable with the (ε, δ) claim and not in the verdict.")
    if ex:
        notes.append("The exposure row reads the canaries of one run as independent trials, which they are not: an "
                     "estimate, never in the verdict.")
    return rows + [""] + notes


def accountant_rows(r: dict) -> list[str]:
    rows = ["| accountant | true ε in | δ | relation | detail |", "|---|---|---|---|---|"]
    for a in r["accounting"]["results"]:
        lo = "—" if a.get("lower") is None else f"{a['lower']:.4g}"
        hi = "no upper value" if a.get("epsilon") is None else f"{a['epsilon']:.4g}"
        rows.append(f"| {a['accountant']} | [{lo}, {hi}] | {probability(a['delta'], 3)} | {a.get('relation', 'add_remove')} | "
                    f"{a.get('detail') or ''} |")
    for name, why in (r["accounting"].get("not_applicable") or {}).items():
        rows.append(f"| {name} | — | — | — | not applicable: {why} |")
    return rows


def limit_lines(r: dict) -> list[str]:
    """How close each test of the claim came to the best possible one-run audit with the same canaries."""
    L = []
    for x in r.get("audit_limits") or []:
        if not x["epsilon_lb"] > 0:
            L.append(f"- {x['attack']}: the best possible one-run audit with these {x['m']} canaries and {x['k_pos']} + "
                     f"{x['k_neg']} guesses shows nothing about a mechanism of exactly the claimed ε = "
                     f"{x['epsilon']:.3g} (its limit is 0): no test with these canaries could reach the claim.")
            continue
        frac = f"{x['fraction']:.0%}" if x.get("fraction") is not None else "—"
        gdp = (f"; Gaussian reading {x['reached_gdp_epsilon_estimate']:.2f} of {x['gdp_epsilon_estimate']:.2f} "
               f"({x['fraction_gdp']:.0%})" if x.get("fraction_gdp") is not None else "")
        L.append(f"- {x['attack']}: reaches {x['reached_epsilon_lb']:.2f} of the {x['epsilon_lb']:.2f} that the best "
                 f"possible one-run audit with these {x['m']} canaries and {x['k_pos']} + {x['k_neg']} guesses shows "
                 f"about a mechanism of exactly the claimed ε = {x['epsilon']:.3g} (μ = {x['mu']:.3f} GDP, median "
                 f"of {x['simulations']} simulated audits) — {frac}{gdp}{_mechanism_limit_text(x)}.")
    return L


def two_sample_lines(r: dict) -> list[str]:
    """The white-box two-sample tests (dpaudit/audit/two_sample.py); reports written before them have none."""
    return [f"- {t['attack']}: **ε ≥ {t['epsilon_lb']:.2f}** at {percent(t['confidence'], 1)} (δ = {probability(t['delta'])}; ceiling "
            f"{t['ceiling']:.2f}): {t['tp']:,} of {t['n_in']:,} inserted and {t['fp']:,} of {t['n_out']:,} held-out "
            f"canaries above the threshold {t['threshold']:.4g}, fixed before scoring at the card mechanism's FPR "
            f"{t['planned_fpr']:g}; the card's own mechanism shows {t['mechanism_limit']:.2f} in the median such "
            f"audit. Valid only if {t['assumption']}."
            for t in r.get("whitebox_two_sample") or []]


def noise_lines(r: dict) -> list[str]:
    """The white-box noise checks (dpaudit/audit/noise_check.py); reports written before them have none."""
    L = []
    for c in r.get("noise_checks") or []:
        head = (f"- {c['attack']}: the {c['values']:,} per-step projections on the {c['m']} {c['kind']} canary "
                f"coordinates ({c['steps']} updates) have root mean square {c['rms']:.4g} (units of C/B), "
                f"{c['ratio']:.3f} × the card's σ = {c['noise_multiplier']:.4g}; ")
        if c["status"] == "below the card":
            L.append(head + f"the noise actually added is at most **{c['upper']:.4g} at {percent(c['confidence'])} "
                            f"confidence, below the card's σ**: these updates carry less noise than the card, and so "
                            f"its ε, states.")
        else:
            extra = ("" if c["ratio"] <= 1 else "; the spread above σ is the inserted canaries themselves" + (
                " (a canary block: no record's gradient reaches it)" if c.get("coordinates") == "block" else
                " and the records' own gradients on these coordinates, which the simulated limits above leave out"))
            L.append(head + f"the noise actually added is at most {c['upper']:.4g} at {percent(c['confidence'])} "
                            f"confidence, so the check finds no shortfall{extra}.")
    return L


def _mechanism_limit_text(x: dict) -> str:
    ml = x.get("mechanism_limit")
    if not ml:
        return ""
    mech = ml["mechanism"]
    frac = f"{ml['fraction']:.0%}" if ml.get("fraction") is not None else "—"
    pool = (f", resampled from {ml['pool']:,} simulated canary scores per class" if ml.get("pool") else "")
    how = (f"median of {ml['simulations']} simulated audits{pool}" if ml.get("method") != "tails" else
           f"the count read from the tails of {ml['pool']:,} simulated canary scores per class")
    whose = ("of the card's mechanism with the canaries at their own rate" if ml.get("canaries_own_rate") else
             "of the mechanism on the card itself")
    return (f"; {whose} (subsampled Gaussian q = {mech['sample_rate']:.4g}, "
            f"σ = {mech['noise_multiplier']:.4g}, {mech['steps']} steps; per-step likelihood ratio, {how}) at most "
            f"{ml['epsilon_lb']:.2f} — {frac}")


def plan_lines(r: dict) -> list[str]:
    """Whether the evaluation followed the plan fixed in the manifest before training (dpaudit/canaries/plan.py)."""
    p = r.get("audit_plan")
    if not p:
        return []
    u = p["used"]
    used = (f"attacks {', '.join(u['attacks'])}; rule {u['rule']}; confidence {u['confidence']:g}; "
            f"{u['n_references']} reference secrets")
    if p["status"] == "as planned":
        return [f"- Evaluation plan: as fixed in canaries.json before training ({used})."]
    if p["status"] == "off-plan":
        return [f"- **Exploratory: off the evaluation plan** fixed before training ({'; '.join(p['departures'])}); "
                "`dpaudit check` fails this report."]
    return [f"- Evaluation plan: none in the manifest; these choices were made at evaluation time ({used})."]


def attack_rows(r: dict) -> list[str]:
    rows = ["| attack | AUC | AUC 95% interval | TPR @ 0.1% FPR | TPR @ 1% FPR | one-run ε lb |",
            "|---|---|---|---|---|---|"]
    coarse: dict[int, list[str]] = {}
    for name, a in r["attacks"].items():
        lb = [e["epsilon_lb"] for e in r["empirical"] if e["attack"] == name
              and e["delta_kind"] == ("claimed" if r["claim"]["private"] else "zero")]
        n_out = a.get("n_nonmembers") or 0
        cells = []
        for key, fpr in (("tpr_at_0_1_fpr", 1e-3), ("tpr_at_1_fpr", 1e-2)):
            mark = "†" if n_out and 1.0 / n_out > fpr else ""
            if mark and name not in coarse.setdefault(n_out, []):
                coarse[n_out].append(name)
            cells.append(f"{a[key]:.3f}{mark}")
        rows.append(f"| {name} | {a['auc']:.3f} | [{a['auc_ci'][0]:.3f}, {a['auc_ci'][1]:.3f}] | "
                    f"{cells[0]} | {cells[1]} | {lb[0] if lb else 0.0:.2f} |")
    for n in sorted(coarse):
        rows.append(f"\n† {', '.join(coarse[n])}: {n} held-out canaries resolve no FPR below 1/{n} = {1 / n:.2%}: a "
                    "TPR at a smaller FPR is the TPR at zero false positives.")
    return rows


def _n(x, spec: str) -> str:
    """A number of a run record formatted, or "?" where the record holds something else (a run.json is anyone's)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return "?"
    if spec == "d":  # a count: written as an integer, as it was recorded
        return str(int(x)) if float(x).is_integer() else "?"
    return format(x, spec)


def clipping_lines(c: dict | None) -> list[str]:
    """Report lines for a ``train_result.clipping`` summary (empty for non-private runs)."""
    if not c or not c.get("steps_observed"):
        return []
    C = c.get("clipping_norm")
    L = [f"- Clipping at C = {_n(C, 'g')}: on average {_n(c.get('mean_fraction_clipped'), '.1%')} of units clipped "
         f"per step (first step {_n(c.get('fraction_clipped_first'), '.1%')}, last "
         f"{_n(c.get('fraction_clipped_last'), '.1%')}); median per-unit gradient norm "
         f"{_n(c.get('median_norm_first'), '.3g')} at the first step, {_n(c.get('median_norm_last'), '.3g')} at the "
         f"last ({_n(c.get('steps_observed'), 'd')} steps observed)."]
    if c.get("all_clipped_every_step") is True:
        first = c.get("median_norm_first")
        ratio = first / C if _n(first, "g") != "?" and _n(C, "g") != "?" and C > 0 else math.inf
        L.append(f"- Note: every unit was clipped at every step (median norm {ratio:.3g}× C at the start): each "
                 "update is a mean of gradient directions. That is Li et al.'s intended small-C regime, but if the "
                 "model stays at a trivial solution (e.g. the majority class) try a larger C: clipping alone, without "
                 "noise, can hold it there (reports/li_repro_minilm_c_sweep).")
    elif c.get("none_clipped_any_step") is True:
        L.append("- Note: no unit was ever clipped: C is above every gradient norm, so the noise sigma*C is larger "
                 "than it needs to be for these gradients; a smaller C adds less noise for the same ε.")
    return L


def training_lines(tr: dict | None) -> list[str]:
    """The training section: steps, sampling, noise, final loss and how hard clipping bit."""
    if not tr:
        return ["- no training summary in run.json"]
    sigma, final = tr.get("noise_multiplier"), tr.get("final_loss")
    noise = f", noise multiplier σ = {_n(sigma, '.4g')}" if sigma is not None else ""
    k = tr.get("final_loss_steps")
    loss = (f"; final training loss {_n(final, '.3f')} (mean over the last {k} of {tr.get('steps')} steps)" if k else
            f"; final training loss {_n(final, '.3f')} (mean of the last 20 physical batches, an older "
            "definition: not comparable between private and non-private runs)") if final is not None else ""
    own = tr.get("sampling") if isinstance(tr.get("sampling"), dict) else None
    if own and not all(isinstance(own.get(x), (int, float)) and not isinstance(own.get(x), bool) and own[x] > 0
                       for x in ("records", "canaries", "accounted", "canary_records", "divisor")):
        own = None  # not the record dpaudit writes: the plain rate line
    rate = (f"sampling rate q = {own['records']:.4g}, its {own['canary_records']} canary records at their own rate "
            f"{own['canaries']:.4g} (every record accounted at {own['accounted']:.4g})" if own else
            f"sampling rate q = {_n(tr.get('sample_rate'), '.4g')}")
    L = [f"- {_n(tr.get('steps'), 'd')} steps over {_n(tr.get('dataset_size'), 'd')} units at {rate}{noise}{loss}; "
         f"{_n(tr.get('seconds', 0.0), '.0f')} s."]
    c = tr.get("clipping") if isinstance(tr.get("clipping"), dict) else {}
    q, n, clip = tr.get("sample_rate"), tr.get("dataset_size"), c.get("clipping_norm")
    if all(_n(x, "g") != "?" for x in (sigma, clip, n)) and clip and n and (own or _n(q, "g") != "?"):
        B = own["divisor"] if own else q * n
        if B > 0:
            tau = sigma * clip / B
            L.append(f"- Noise on the averaged gradient: std σC/B = {tau:.2g} per coordinate (expected batch B = "
                     f"{B:.0f}). Under Adam, a coordinate whose mean gradient is below this moves at random by about "
                     "lr per step, however small σ is (reports/li_repro_minilm_c_sweep).")
    return L + clipping_lines(c)


def render_markdown(r: dict, plots: list[str], redact: bool = False) -> str:
    """REPORT.md of report ``r``: every string of ``r`` is escaped first (:func:`dpaudit.markup.md_tree`), so no
    input text can add a line, a link, HTML or a column."""
    raw = r["reproducibility"]  # shown in code blocks, where nothing is read as markdown: unescaped (fenced)
    r = md_tree(r)  # a copy: an older report's words are then read as today's (docs/verdicts.md)
    current_words(r)
    ck = r["checkpoint"]
    title = ck.get("variant") or ck.get("path") or f"a model held as objects (hash {ck.get('hash')})"
    L = [f"# dpaudit report: {title}", "",
         f"**Verdict:** {headline(r)}", "", *summary_lines(r), "", "## Bounds", "",
         *bound_rows(r), "", "## Accounting", "", *accountant_rows(r), ""]
    for f in r["accounting"].get("findings", []):
        L.append(f"- Finding: {f}")
    lim = limit_lines(r)
    if lim:
        L += ["", "What these canaries could show at best (the audit's own limit, not the claim's):", "", *lim]
    two = two_sample_lines(r)
    if two:
        L += ["", "Past thresholding (the two-sample test of independent canaries, docs/methods.md; beside the verdict, "
              "not one of its tests):", "", *two]
    noise = noise_lines(r)
    if noise:
        L += ["", "Noise in the recorded updates (a check of the card's σ beside the verdict, not one of its tests):",
              "", *noise]
    probe = report_checks.table(r)
    if probe:
        L += ["", "## Mechanism checks", "", "What the probe saw the training code do, against its privacy card "
              "(docs/probe.md):", "", *probe]
    L += ["", "## Training", "", *training_lines(r["reproducibility"].get("train_result"))]
    L += ["", "## Task metrics", ""]
    if r["metrics"]:
        m = r["metrics"]
        split = m.get("split", "test")
        held = " held out from the training split; the test split was not used" if split == "validation" else ""
        L.append(f"- task `{m.get('task')}` on {m['n_test']} {split} examples ({m['source']}{held}): " + ", ".join(
            f"{k} **{m[k]:.3f}**" for k in TASK_METRICS if k in m)
            + (f"; decoding: {m['decoding']}" if "decoding" in m else ""))
        if m.get("base_model"):
            b = m["base_model"]
            L.append("- the same metrics of the model before fine-tuning (zero-shot reference): " + ", ".join(
                f"{k} {b[k]:.3f}" for k in TASK_METRICS if k in b))
        L += [f"- Note: {n}" for n in m.get("notes", [])]
        for ex in m.get("examples", []):
            L.append(f"  - `{ex['mr']}` → “{ex['generated']}” (reference: “{ex['reference']}”)")
    else:
        L.append("- no task recorded in run.json; task metrics skipped")
    L += ["", "## Attacks", "", *attack_rows(r), ""]
    L += [f"- Note: {n}" for n in r.get("notes", [])] + ([""] if r.get("notes") else [])
    if r["exposure"]:
        ex = r["exposure"]
        how = ("ranked over the whole space by a token trie (log P(secret | prefix); the suffix is not scored)"
               if ex.get("enumerated") and ex.get("suffix_scored") is False else
               "ranked over the whole space" if ex.get("enumerated") else
               f"ranked among {ex['n_references']} sampled reference secrets")
        L.append(f"Exposure ({how}): mean {ex['mean_inserted']:.2f} bits for inserted canaries vs "
                 f"{ex['mean_held_out']:.2f} held out; {ex['rank1_inserted']} inserted canaries rank first among "
                 f"{ex['n_references']} reference secrets (max {ex['max_rank_exposure']:.2f} bits by ranks, "
                 f"log2|R| = {ex['max_exposure']:.2f}); skew-normal extrapolation gives "
                 f"{ex['mean_inserted_extrapolated']:.2f} bits on average for inserted canaries (an estimate).")
        L.append("")
    for p in plots:
        L.append(f"![{p}]({p})")
    L += ["", "## Canaries", ""]
    cp = r["canary_plan"]
    if cp.get("design"):
        L += [f"Design `{cp['design']}` (fixed before training)"
              + (f"; pool: {cp['pool_source']}" if cp.get("pool_source") else "")
              + (". The attacks score the loss on the secret's tokens only." if cp.get("score_on") == "secret"
                 else "."), ""]
    framing = cp.get("framing")
    if framing:
        how = 'BOS + text + EOS' if framing == 'bos_eos' else 'tokenizer(text), with the special tokens it adds'
        said = cp.get("framing_source")  # "option": the user's word for how their loop fed records (not verifiable)
        L += [(f"Scored as stated for this model's training loop (`--canary-framing {framing}`, not verified): {how}."
               if said == "option" else f"Scored as the model saw its training records: {how} "
                                         f"(`--canary-framing {framing}`)."), ""]
    exposed = r["exposure"].get("canaries", []) if r["exposure"] else []
    if exposed:
        L += ["| id | inserted | repetitions | secret | exposure | extrapolated |", "|---|---|---|---|---|---|"]
    else:
        L.append("No exposure per canary: exposure is not among this evaluation's attacks; the canaries are audited by "
                 "the attacks above.")
    for c in exposed:
        sec = "▇" * len(c["secret"]) if redact else c["secret"]
        L.append(f"| {c['id']} | {'yes' if c['inserted'] else 'no'} | {c['repetitions']} | {sec} | "
                 f"{c['exposure']:.2f} | {c['exposure_extrapolated']:.2f} |")
    rep = raw
    L += ["", "## Reproducibility", "", *fenced([f"command: {rep.get('command')}",
                                                 f"checkpoint hash: {rep.get('checkpoint_hash')}",
                                                 f"seeds: {json.dumps(rep.get('seeds'))}",
                                                 f"data: {json.dumps(rep.get('data'))}",
                                                 f"versions: {json.dumps(rep.get('versions'))}",
                                                 f"machine: {json.dumps(rep.get('machine'))}"]),
          "", "Config:", "", *fenced(json.dumps(rep.get("config"), indent=1).split("\n"), "json"), "",
          *_rng_line(r), "## Limitations", ""]
    L += [f"- {x}" for x in LIMITATIONS]
    return "\n".join(L) + "\n"


def _rng_line(r: dict) -> list[str]:
    """Where the mechanism's randomness came from (the card's ``extra.rng``), when the trainer recorded it."""
    rng = (r.get("claim") or {}).get("rng")
    if not rng:
        return []
    if rng.get("mode") == "secure":
        return ["Noise: secure (train.secure_rng): seeded from the operating system's entropy, the seed never written "
                "anywhere.", ""]
    return ["Noise: seeded from the published seed, reproducible for research: anyone with run.json can regenerate "
            "the noise of this model, so it is not a release-grade run (set train.secure_rng = true).", ""]


