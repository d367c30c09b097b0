"""The tables of reports/pmixed/README.md, printed from the committed report.json files: the perplexity of the
four systems on the same held-out tokens, and PMixED's claim against the exact per-query check and the
black-box canary audit.
Run: `python experiments/pmixed_rows.py [DIR] > reports/pmixed/rows.md` (DIR defaults to reports/pmixed).
"""

from __future__ import annotations

from pathlib import Path

from dpaudit.run_folder import from_argv

RUN = from_argv(__doc__, Path(__file__).resolve().parents[1] / "reports" / "pmixed")
PMIXED, DP = "pmixed-eps8", "dp-lora-eps8"


def load(v: str) -> dict | None:
    return RUN.report(v) if RUN.has_report(v) else None


def best(r: dict, kind: str) -> str:
    rows = [e for e in r["empirical"] if e["delta_kind"] == kind]
    if not rows:
        return "—"
    e = max(rows, key=lambda e: e["epsilon_lb"])
    return f"{e['epsilon_lb']:.2f} (ceiling {e['ceiling']:.2f}, group size {e['group_size']})"


def main() -> None:
    pm, dp = load(PMIXED), load(DP)
    if pm is None:
        print("PMixED not run yet")
        return
    s, pp, ex = pm["pmixed"]["spec"], pm["metrics"]["pmixed_perplexity"], pm["pmixed"]["exact"]
    print(f"Perplexity on the same {pp['tokens']} held-out tokens ({pm['metrics']['n_test']} records of "
          f"{pm['metrics']['source']} users no model trained on):\n")
    print("| system | privacy | perplexity |\n|---|---|---|")
    print(f"| public model p0 (SmolLM2-135M) | never saw the data | {pp['public']:.2f} |")
    print(f"| non-private ensemble (mean of the N = {s['n_models']} adapters) | none | {pp['ensemble']:.2f} |")
    print(f"| PMixED (N = {s['n_models']}, q = {s['sample_rate']:g}, T = {s['queries']}) | claimed ε_G = "
          f"{s['epsilon']:g}, δ = {s['delta']:.0e}, one partition, per budget of T queries: these {pp['tokens']} "
          f"tokens spend {pp['runs_of_T']} fresh budgets | {pp['pmixed']:.2f} |")
    if dp is not None:
        c = dp["claim"]
        print(f"| DP-LoRA (DP-Adam, shared engine) | ε = {c['epsilon']:.2f}, δ = {c['delta']:.0e}, one record "
              f"({dp['accounting']['status']}) | {dp['metrics']['perplexity']:.2f} |")
    else:
        print("| DP-LoRA | not run yet | |")
    print(f"\nPMixED answers: mean |S_t| {pp['mean_subset_size']:.2f}, no model sampled at "
          f"{pp['empty_subset_fraction']:.1%} of queries, median λ {pp['median_lambda']:.3g}; β by |S_t| = 1, 2, 3: "
          + ", ".join(f"{b:.4g}" for b in pm["pmixed"]["betas"][:3]) + ".\n")
    print("| check | value | against the claim |\n|---|---|---|")
    print(f"| largest exact per-query D_{s['alpha']} ({ex['queries_checked']} queries) | {ex['max_per_query']:.4g} | "
          f"claimed {ex['claimed_per_query']:.4g} per query ({ex['per_query_ratio']:.3g}×; "
          f"{ex['queries_over_claim']} queries over) |")
    print(f"| exact RDP of these queries composed | {ex['composed_total_max']:.4g} | claimed "
          f"{ex['claimed_total_for_these']:.4g} for as many |")
    print(f"| worst query asked T = {s['queries']} times: true ε ≥ | {ex['epsilon_lower']:.3g} | claimed "
          f"{s['epsilon']:g} at δ = {s['delta']:.0e} |")
    print(f"| black-box extraction, one-run bound at the claim | {best(pm, 'claimed')} | claimed {s['epsilon']:g} "
          "(group size 2: a canary replaces one model) |")
    print(f"| black-box extraction, §5.3's record-level reading | {best(pm, 'record_claim')} | claimed "
          f"{s['epsilon']:g} |")
    print(f"| verdict | `{pm['verdict']['status']}` | accounting {pm['verdict']['accounting']['status']}, empirical "
          f"{pm['verdict']['empirical']['status']} |")
    if dp is not None:
        print(f"\nDP-LoRA: verdict `{dp['verdict']['status']}`, best black-box bound {best(dp, 'claimed')}.")


if __name__ == "__main__":
    main()
