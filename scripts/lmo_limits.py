"""Where each LMO-DP claim of a run stands against what the sound methods can prove (dpaudit.accounting.lmo_limits):
the proven interval of the report (the vector accountant's upper end, the exact-PLD lower end), the dense-limit
estimate (not a bound), and the floors of an RDP analysis and of a Gaussian-domination analysis over every
direction. A claim inside the proven interval is settled only if some method's floor lies below it.

    python scripts/lmo_limits.py reports/lmo_dp --variant lmo-eps0p16 --variant lmo-eps0p3 --variant lmo-eps3 \\
        > reports/lmo_dp/limits.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def row(folder: Path) -> dict:
    from dpaudit.accounting import lmo_limits

    card = json.loads((folder / "checkpoint" / "privacy_card.json").read_text())
    rep = json.loads((folder / "report" / "report.json").read_text())
    ev, claim, delta = card["mechanism"]["events"][0], card["claim"]["epsilon"], card["claim"]["delta"]
    vec = next(r for r in rep["accounting"]["results"] if r["accountant"] == "lmo_vector")
    lim = lmo_limits.limits(ev, delta)
    floors = {"RDP": lim["rdp_floor"], "Gaussian domination": lim["gdp_floor"]}
    if vec["lower"] > claim:
        reading = f"refuted: the proven lower end {vec['lower']:.3f} is above the claim"
    elif vec["epsilon"] <= claim:
        reading = "proven: the upper end is within the claim"
    elif all(f > claim for f in floors.values()):
        reading = ("cannot be settled by these methods: the claim is above the proven lower end and below every "
                   "method's floor" + (" (the dense-limit estimate is below it)" if lim["dense_limit_estimate"] < claim
                                       else " (the dense-limit estimate is above it)"))
    else:
        reading = ("open: a method's floor is below the claim (" + ", ".join(k for k, f in floors.items() if f <= claim)
                   + "), so a tighter analysis of that kind could settle it")
    return {"variant": folder.name, "claim": claim, "delta": delta, "lower": vec["lower"], "upper": vec["epsilon"],
            "verdict": rep["verdict"]["status"], **lim, "reading": reading}


def table(rows: list[dict]) -> str:
    L = ["| variant | claimed ε (δ) | proven: true ε in | dense-limit estimate (not a bound) | RDP floor | "
         "Gaussian-domination floor | verdict | reading |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['variant']} | {r['claim']:.4f} ({r['delta']:g}) | [{r['lower']:.4f}, {r['upper']:.4f}] | "
                 f"{r['dense_limit_estimate']:.4f} (σ = {r['fisher_multiplier']:.3f}) | {r['rdp_floor']:.4f} | "
                 f"{r['gdp_floor']:.4f} (σ = {r['median_test_multiplier']:.3f}) | `{r['verdict']}` | {r['reading']} |")
    return "\n".join(L) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a run folder of configs/lmo_dp_sentiment.toml (one sub-folder per variant)")
    ap.add_argument("--variant", action="append", required=True, help="an LMO-DP variant with per-coordinate draws")
    a = ap.parse_args(argv)
    print(table([row(a.run / v) for v in a.variant]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
