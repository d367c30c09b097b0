"""Power of the score auditor's threshold strategies (dpaudit/audit/auditor.py) on simulated mechanisms whose true
epsilon is known (dpaudit/audit/simulated.py), and how the strategy the plan chooses before the scores exist
(`dpaudit audit strategy`, dpaudit/audit/strategy_plan.py, on seeds of its own) compares with the best one.

    python experiments/score_auditor_power.py --out reports/score_auditor [--seeds 100] [--seeds-large 16]
        [--plan-sims 20] [--jobs 2]

Each cell: every strategy's median 95% bound over the seeds and how many exceeded the truth (their validity is
tested in tests/audit/test_auditor.py), the plan's choice and its median against the largest. Writes README.md
(the table) and results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.audit import simulated, strategy_plan  # noqa: E402
from dpaudit.cli.audit import pld_epsilon  # noqa: E402

DELTA = 1e-5
MECHANISMS = ("null", "rr:1", "rr:2", "rr:4", "gaussian:0.5", "gaussian:1", "gaussian:2", "gaussian:4")
SIZES = (1000, 10000)


def cell(task: tuple) -> list[dict]:
    """Every strategy's bounds on ``seeds`` simulated audits of one (mechanism, m), and the plan's choice."""
    spec, m, seeds, plan_sims = task
    t0 = time.time()
    mech = simulated.parse(spec)
    truth = mech.true_epsilon(DELTA, pld_epsilon)
    plan = strategy_plan.choose(mech, m, DELTA, 0.95, sims=plan_sims)
    rows = []
    for name, make in strategy_plan.CANDIDATES.items():
        b = strategy_plan.bounds(mech, m, make(m), DELTA, 0.95, [[i, m] for i in range(seeds)])
        rows.append({"mechanism": spec, "true_epsilon": truth, "m": m, "strategy": name, "seeds": seeds,
                     "median_bound": float(np.median(b)), "above_truth": int(np.sum(np.array(b) > truth + 1e-9)),
                     "bounds": b, "plan_choice": plan["choice"], "plan_sims": plan_sims,
                     "plan_medians": plan["medians"]})
    print(f"{spec:14s} m={m:6d} {time.time() - t0:6.0f} s  plan: {plan['choice']}  " + "  ".join(
        f"{r['strategy']} {r['median_bound']:.2f}" for r in rows), flush=True)
    return rows


def _share(cells: dict, name: str, top: float) -> str:
    return f"{cells[name]['median_bound'] / top:.0%}" if top > 0 else "—"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="Folder for README.md and results.json.")
    ap.add_argument("--seeds", type=int, default=100, help="Simulated audits per strategy at m = 1,000.")
    ap.add_argument("--seeds-large", type=int, default=16, help="Simulated audits per strategy at m = 10,000.")
    ap.add_argument("--plan-sims", type=int, default=20, help="The plan's own simulations per strategy (its seeds "
                    "are none of the table's).")
    ap.add_argument("--jobs", type=int, default=2, help="Cells computed side by side (processes).")
    args = ap.parse_args(argv)
    tasks = [(spec, m, args.seeds if m == 1000 else args.seeds_large, args.plan_sims) for m in SIZES
             for spec in MECHANISMS]
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = [r for rows in pool.map(cell, tasks) for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    # one row a line: 16 cells x 4 strategies x up to 200 bounds stay small in the checkout
    (args.out / "results.json").write_text("[\n" + ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows) + "\n]\n")
    names = list(strategy_plan.CANDIDATES)
    lines = ["# Power of the score auditor's threshold strategies, and the strategy the plan chooses", "",
             f"`python experiments/score_auditor_power.py --out {args.out} --seeds {args.seeds} --seeds-large "
             f"{args.seeds_large} --plan-sims {args.plan_sims}`, {date.today().isoformat()}, {platform.machine()} "
             f"(Python {platform.python_version()}), {time.time() - t0:.0f} s with {args.jobs} processes. Each cell: "
             f"the median 95% ε lower bound at δ = {DELTA:g} (f-DP analysis of the guesses) over {args.seeds} "
             f"simulated audits at m = 1,000 and {args.seeds_large} at m = 10,000, and in brackets how many exceeded "
             "the true ε (validity: tests/audit/test_auditor.py). `fixed` is m/4 + m/4 guesses (the default), "
             "`held-out` a seeded half tunes the guess counts, `search` a geometric grid with Bonferroni, `median` "
             "the median of 11 held-out splits at 1 - α/2. **plan** is the strategy `dpaudit audit strategy "
             f"--mechanism SPEC --canaries M --sims {args.plan_sims}` chooses before any score exists (its own "
             "seeds), with its median as a share of the largest.", "",
             "| mechanism | true ε | m | " + " | ".join(names) + " | largest | plan | plan / largest | default / "
             "largest |", "|---|---|---|" + "---|" * (len(names) + 4)]
    for m in SIZES:
        for spec in MECHANISMS:
            cells = {r["strategy"]: r for r in rows if r["mechanism"] == spec and r["m"] == m}
            first = next(iter(cells.values()))
            top = max(cells[n]["median_bound"] for n in names)
            lead = ", ".join(n for n in names if cells[n]["median_bound"] == top) if top > 0 else "— (all 0)"
            lines.append(f"| {spec} | {first['true_epsilon']:.2f} | {m:,} | " + " | ".join(
                f"{cells[n]['median_bound']:.2f} ({cells[n]['above_truth']})" for n in names)
                + f" | {lead} | {first['plan_choice']} | {_share(cells, first['plan_choice'], top)} | "
                f"{_share(cells, 'fixed', top)} |")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
