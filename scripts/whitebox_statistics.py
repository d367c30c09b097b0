"""The same white-box canaries, two scores and two guess counts: the sum of the projections and the per-step
likelihood ratio at m/4 + m/4 guesses, and the likelihood ratio at the k + k guesses fixed from the card's
mechanism (dpaudit/audit/mechanism_limit.py), beside what the best one-run audit of that mechanism shows.

For every checkpoint under the given report folders that kept its per-step projections, each is audited with
the delta and confidence of its report's white-box row (the f-DP bound and the Gaussian-DP estimate), from the
committed files alone (no model is loaded).

    python scripts/whitebox_statistics.py reports/demo_lm reports/li_repro_sentiment > reports/bench/whitebox_statistics.md
"""

from __future__ import annotations

import sys
from pathlib import Path


def rows(folder: Path) -> list[str]:
    from dpaudit.audit import families, fdp, mechanism_limit, one_run
    from dpaudit.claim.card import load_card
    from dpaudit.evaluation import scoring
    from dpaudit.run_folder import RunFolder

    out = []
    run = RunFolder(folder)
    for variant in run.variants():
        r, ck = run.report(variant), run.checkpoint(variant)
        wbs = scoring.whitebox(ck, load_card(ck / "privacy_card.json").audited_mechanism()) or []
        for wb in wbs:
            if wb["statistic"] != "likelihood_ratio":
                continue
            row = next(e for e in r["empirical"] if e["attack"] == wb["name"] and e["delta_kind"] == "claimed")
            m, d, c = len(wb["signs"]), row["delta"], row["confidence"]
            k = families.whitebox_guesses(wb, d, c)[0]
            cells = []
            for scores, kk in ((wb["sum_scores"], m // 4), (wb["scores"], m // 4), (wb["scores"], k)):
                g = one_run.audit(scores, wb["signs"], kk, kk, delta=d, confidence=c)
                f = fdp.audit(g.v, m, kk, kk, d, c)
                cells.append(f"{g.v}/{g.r} | {f.epsilon_lb:.2f} | {f.gdp_epsilon_estimate:.2f}")
            lim = mechanism_limit.limit(m, k, wb["statistic_params"], d, c)
            cells.append("—" if lim is None else f"{lim['epsilon_lb']:.2f}")
            out.append(f"| {folder.name}/{variant} | {r['claim']['epsilon']:.3g} | {m} | "
                       + " | ".join(cells[:2]) + f" | {k} + {k} | {cells[2]} | {cells[3]} |")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lines = ["| run | claimed ε | m | sum, m/4: right / guesses | f-DP ε ≥ | Gaussian-DP estimate | likelihood ratio, "
             "m/4: right / guesses | f-DP ε ≥ | Gaussian-DP estimate | guesses fixed from the card | LR: right / "
             "guesses | f-DP ε ≥ | Gaussian-DP estimate | best audit of the card's mechanism (median) |",
             "|---" * 14 + "|"]
    for a in argv:
        lines += rows(Path(a))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
