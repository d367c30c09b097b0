"""The same white-box canaries, two scores: the sum of the projections and the per-step likelihood ratio.

For every checkpoint under the given report folders that kept its per-step projections, both statistics are
audited with the same guesses (m/4 + m/4), delta and confidence as its report's white-box row (the f-DP bound,
the Steinke et al. bound and the Gaussian-DP estimate), from the committed files alone (no model is loaded).

    python scripts/whitebox_statistics.py reports/demo_lm reports/li_repro_sentiment > reports/bench/whitebox_statistics.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(folder: Path) -> list[str]:
    from dpaudit import scoring
    from dpaudit.audit import fdp, one_run

    out = []
    for rep in sorted(folder.glob("*/report/report.json")):
        r = json.loads(rep.read_text())
        ck = rep.parent.parent / "checkpoint"
        wbs = scoring.whitebox(ck, r["mechanism"]) or []
        for wb in wbs:
            if wb["statistic"] != "likelihood_ratio":
                continue
            row = next(e for e in r["empirical"] if e["attack"] == wb["name"] and e["delta_kind"] == "claimed")
            m = len(wb["signs"])
            cells = []
            for scores in (wb["sum_scores"], wb["scores"]):
                g = one_run.audit(scores, wb["signs"], m // 4, m // 4, delta=row["delta"], confidence=row["confidence"])
                f = fdp.audit(g.v, m, m // 4, m // 4, row["delta"], row["confidence"])
                cells.append(f"{g.v}/{g.r} | {f.epsilon_lb:.2f} | {f.gdp_epsilon_estimate:.2f}")
            out.append(f"| {folder.name}/{rep.parent.parent.name} | {r['claim']['epsilon']:.3g} | {cells[0]} | {cells[1]} |")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lines = ["| run | claimed ε | sum: right / guesses | sum: f-DP ε ≥ | sum: Gaussian-DP estimate | likelihood ratio: "
             "right / guesses | LR: f-DP ε ≥ | LR: Gaussian-DP estimate |", "|---|---|---|---|---|---|---|---|"]
    for a in argv:
        lines += rows(Path(a))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
