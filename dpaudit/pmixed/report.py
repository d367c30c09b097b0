"""REPORT.md and report.json of a PMixED deployment's evaluation (the report.json contract of dpaudit.report.write,
so ``dpaudit check`` and ``dpaudit run``'s comparison read it like any other), written atomically."""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit.io import jsonable
from dpaudit.markup import fenced, md_tree, probability
from dpaudit.report import markdown as common

LIMITATIONS = [
    "The exact check covers the queries it logged (canary secrets of inserted canaries); a query it did not "
    "ask can be worse. Its lower value of ε is exact arithmetic on the deployment's own distributions (PLD "
    "rounded down), not a statistical estimate.",
    "The black-box audit sees only sampled tokens within one budget of T queries; a bound far below the claim "
    "is not evidence that the claim holds.",
    "No accountant analyses PMixED: its claim rests on the paper's per-query bound, which assumes the divergence "
    "bound at every Rényi order while the method enforces it at one.",
    "The public model must not have seen the private data (§8 of the brief); dpaudit cannot check that.",
]


def render(r: dict) -> str:
    raw = r["reproducibility"]  # shown in a code block, where nothing is read as markdown: unescaped (fenced)
    r = md_tree(r)  # every input string escaped (dpaudit.markup)
    p = r["pmixed"]
    s, ex = p["spec"], p["exact"]
    L = [f"# dpaudit report: {r['checkpoint'].get('variant') or r['checkpoint']['path']} (PMixED deployment)", "",
         f"**Verdict:** {common.headline(r)}", "", *common.summary_lines(r), "",
         "## The deployment", "",
         f"- N = {s['n_models']} LoRA adapters on disjoint partitions ({s['partition_rule']}), public model p0; "
         f"each query samples models at rate q = {s['sample_rate']:g} (Poisson, no duplicates), order α = {s['alpha']}, "
         f"budget T = {s['queries']} queries.",
         f"- Claim: (ε_G, δ) = ({s['epsilon']:g}, {probability(s['delta'], 3)}) for one partition (add/remove one model): total RDP "
         f"ε_RDP = {p['rdp_budget']:.4g} at α = {s['alpha']}, {p['per_query_rdp']:.4g} per query "
         f"(Thm C.4, '{s['reading']}' reading).",
         "- β by realised |S_t| (recomputed per query): " + ", ".join(
             f"{n}: {b:.4g}" for n, b in enumerate(p["betas"], start=1)) + ".",
         f"- Ledger: {p['ledger']['spent']} of {p['ledger']['queries']} queries spent by users of this deployment "
         "(the audit below plays its own adversary with one budget of T).", "",
         "## Exact check of the per-query claim", "",
         f"- {ex['queries_checked']} queries checked (the secret tokens of inserted canaries, each with its true "
         f"prefix, and {ex.get('transcript_queries_checked', 0)} queries users asked, from the transcript): D_α^↔ "
         "of the deployment's output law against removing each partition, exact."]
    if ex["queries_checked"]:
        L += [f"- Largest per-query divergence **{ex['max_per_query']:.4g}** against the claimed "
              f"{ex['claimed_per_query']:.4g} ({ex['per_query_ratio']:.3g}×); {ex['queries_over_claim']} of "
              f"{ex['queries_checked']} queries exceed the claim; median {ex['median_per_query']:.3g}.",
              f"- Composed over these queries (exact for a fixed list): {ex['composed_total_max']:.4g} against the "
              f"claimed {ex['claimed_total_for_these']:.4g}; the worst query asked T = {s['queries']} times: "
              f"{ex['repeat_worst_total']:.4g} against ε_RDP = {ex['claimed_rdp_budget']:.4g}.",
              f"- That repeated query gives true ε ≥ **{ex['epsilon_lower']:.4g}** at δ = {probability(s['delta'], 3)} "
              f"(exact PLD, rounded down) against the claimed {s['epsilon']:g}; worst query: "
              f"{ex['worst_query_canary']}" + (f", partition {'holding' if ex['worst_is_owner'] else 'not holding'} it"
                                                if not str(ex['worst_query_canary']).startswith("transcript") else "")
              + "."]
    L += ["", "## Bounds", "", *common.bound_rows(r), "", "## Accounting", "", *common.accountant_rows(r), ""]
    for f in r["accounting"].get("findings", []):
        L.append(f"- Finding: {f}")
    m = r.get("metrics") or {}
    if m.get("pmixed_perplexity"):
        pp = m["pmixed_perplexity"]
        L += ["", "## Perplexity (teacher-forced, held-out users)", "",
              "| system | perplexity |", "|---|---|",
              f"| public model p0 | {pp['public']:.2f} |", f"| non-private ensemble (mean of N) | {pp['ensemble']:.2f} |",
              f"| PMixED | {pp['pmixed']:.2f} |", "",
              f"- {pp['tokens']} tokens of {m['n_test']} {m['split']} records ({m['source']}), {pp['runs_of_T']} runs of "
              f"T queries each; mean |S_t| {pp['mean_subset_size']:.2f}, empty subsets {pp['empty_subset_fraction']:.1%}, "
              f"λ median {pp['median_lambda']:.3g} (mean {pp['mean_lambda']:.3g})."]
    L += ["", "## Black-box canary audit", "", *common.attack_rows(r), "",
          f"- {p['canary_queries']} queries (one per secret token of {r['canary_plan']['m']} canaries); score = secret "
          "tokens emitted; bound at group size 2 (inserting a canary replaces one partition's model).", ""]
    rep = raw
    L += ["## Reproducibility", "", *fenced([f"command: {rep.get('command')}",
                                            f"deployment hash: {rep.get('checkpoint_hash')}",
                                            f"seeds: {json.dumps(rep.get('seeds'))}", f"evaluation seed: {p['seed']}",
                                            f"data: {json.dumps(rep.get('data'))}",
                                            f"versions: {json.dumps(rep.get('versions'))}",
                                            f"machine: {json.dumps(rep.get('machine'))}"]), "",
          "## Limitations", "", *[f"- {x}" for x in LIMITATIONS]]
    return "\n".join(L) + "\n"


def write(r: dict, out: Path, redact: bool = False) -> Path:
    from dpaudit.folders import atomic_folder
    from dpaudit.io import REPORT_FILES

    with atomic_folder(out, owned=REPORT_FILES) as tmp:  # an evaluation's plots left there are not this report's
        (tmp / "report.json").write_text(json.dumps(jsonable(r), indent=1) + "\n")
        (tmp / "REPORT.md").write_text(render(r))
    return Path(out)
