"""Power of the score auditor's threshold strategies (dpaudit/audit/auditor.py) on simulated mechanisms whose true
epsilon is known: the median 95% bound over seeds, and how many bounds exceeded the truth (their validity is tested
in tests/audit/test_auditor.py at 200 runs each).

    python experiments/score_auditor_power.py --out reports/score_auditor

Writes README.md (the table) and results.json into --out.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.audit import many_run  # noqa: E402
from dpaudit.audit.auditor import Fixed, HeldOut, MedianOfSplits, ScoreAuditor, Search  # noqa: E402

DELTA = 1e-5
LARGE = ("null (ε = 0)", "Gaussian μ = 1")  # also at m = 10,000 (the weak-attack, large-m case)


def mechanisms():
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.accounting.dpa_pld import epsilon

    def gaussian(mu):
        def draw(rng, m):
            s = rng.choice([-1, 1], size=m)
            return rng.normal(size=m) + mu * (s > 0), s
        return draw, many_run.gdp_epsilon(mu, DELTA)

    def rr(eps0):
        def draw(rng, m):
            s = rng.choice([-1, 1], size=m)
            keep = rng.random(m) < math.exp(eps0) / (1 + math.exp(eps0))
            return np.where(keep, s, -s) + 1e-9 * rng.normal(size=m), s
        return draw, math.log(math.exp(eps0) - DELTA * (1 + math.exp(eps0)))

    def subsampled(q, sigma, steps):
        def draw(rng, m):
            s = rng.choice([-1, 1], size=m)
            used = (rng.random((m, steps)) < q) & (s[:, None] > 0)
            return (used + sigma * rng.normal(size=(m, steps))).sum(axis=1), s
        return draw, epsilon([SubsampledGaussian(q, sigma, steps)], DELTA)

    def null(rng, m):
        return rng.normal(size=m), rng.choice([-1, 1], size=m)

    return {"null (ε = 0)": (null, 0.0), "Gaussian μ = 1": gaussian(1.0), "Gaussian μ = 2": gaussian(2.0),
            "randomised response ε = 2": rr(2.0), "randomised response ε = 4": rr(4.0),
            "subsampled Gaussian q = 0.5, σ = 0.5, T = 4": subsampled(0.5, 0.5, 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=20, help="Seeds per cell at m = 1,000 (a quarter as many at 10,000).")
    args = ap.parse_args(argv)
    strategies = {"fixed m/4 + m/4 (default)": lambda m: Fixed(m // 4, m // 4), "held-out split": lambda m: HeldOut(),
                  "search, Bonferroni": lambda m: Search(), "median of 11 splits": lambda m: MedianOfSplits()}
    rows, t0 = [], time.time()
    for mname, (draw, truth) in mechanisms().items():
        for m in (1000, 10000) if mname in LARGE else (1000,):
            seeds = args.seeds if m == 1000 else max(1, args.seeds // 4)
            for sname, make in strategies.items():
                bounds = []
                for seed in range(seeds):
                    sc, s = draw(np.random.default_rng([seed, m]), m)
                    bounds.append(ScoreAuditor(sc, s).audit(make(m), delta=DELTA).epsilon_lb)
                rows.append({"mechanism": mname, "true_epsilon": truth, "m": m, "strategy": sname, "seeds": seeds,
                             "median_bound": float(np.median(bounds)),
                             "above_truth": int(np.sum(np.array(bounds) > truth + 1e-9)), "bounds": bounds})
                print(f"{mname:45s} m={m:6d} {sname:28s} median {rows[-1]['median_bound']:.3f} "
                      f"(truth {truth:.3f}) {time.time() - t0:.0f}s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    names = list(strategies)
    lines = ["# Power of the score auditor's threshold strategies", "",
             f"`python experiments/score_auditor_power.py --out {args.out}` ({args.seeds} seeds per cell at m = 1,000, "
             f"{max(1, args.seeds // 4)} at 10,000), {date.today().isoformat()}, {platform.machine()} "
             f"({platform.python_version()}), {time.time() - t0:.0f} s. Each cell: the median 95% ε lower bound at "
             f"δ = {DELTA:g} (f-DP analysis of the guesses) over the seeds, and in brackets how many of them exceeded the "
             "true ε (validity: tests/audit/test_auditor.py, 200 runs per strategy and mechanism, at most 19 above). "
             "dpaudit/audit/auditor.py defines the strategies; `dpaudit audit scores FILE --strategy S` runs them.", "",
             "| mechanism | true ε | m | " + " | ".join(names) + " | largest |", "|---|---|---|" + "---|" * (len(names) + 1)]
    for mname in dict.fromkeys(r["mechanism"] for r in rows):
        for m in sorted({r["m"] for r in rows if r["mechanism"] == mname}):
            cells = {r["strategy"]: r for r in rows if r["mechanism"] == mname and r["m"] == m}
            truth = next(iter(cells.values()))["true_epsilon"]
            top = max(cells[n]["median_bound"] for n in names)
            lead = ", ".join(n for n in names if cells[n]["median_bound"] == top) if top > 0 else "—"
            lines.append(f"| {mname} | {truth:.2f} | {m:,} | " + " | ".join(
                f"{cells[n]['median_bound']:.2f} ({cells[n]['above_truth']})" for n in names) + f" | {lead} |")
    (args.out / "README.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
