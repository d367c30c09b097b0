"""What the same PMixED adapters give at other sampling rates q (the paper tunes q at prediction time, without
retraining): for each q, a deployment with that q and otherwise the same claim (eps_G, delta, alpha, T) — held
in memory, nothing written into the deployment — its perplexity through the protocol on the held-out tokens,
and the exact per-query check on the first K secret-token queries of the inserted canaries.

    python scripts/pmixed_sweep.py reports/pmixed/pmixed-eps8/checkpoint --rates 0.03,0.1,0.3,1 --max-texts 150 \\
        --out reports/pmixed/sweep.json > reports/pmixed/sweep.md
    python scripts/pmixed_sweep.py --table reports/pmixed/sweep.json     # the table again, from the JSON
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

RATES = (0.03, 0.1, 0.3, 1.0)


def table(rows: list[dict]) -> str:
    L = ["| q | β(1) | β(2) | mean \\|S_t\\| | perplexity | exact D per query: max (median) | claimed per query | "
         "ratio | worst query × T: true ε ≥ |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['q']:g} | {r['betas'][0]:.4g} | {r['betas'][1]:.4g} | {r['mean_subset_size']:.2f} | "
                 f"{r['perplexity']:.2f} | {r['max_per_query']:.3g} ({r['median_per_query']:.3g}) | "
                 f"{r['claimed_per_query']:.3g} | {r['per_query_ratio']:.3g}× | {r['epsilon_lower']:.3g} |")
    if rows:
        L.append(f"\nOn the same held-out tokens: public model p0 {rows[0]['public']:.2f}, non-private ensemble "
                 f"{rows[0]['ensemble']:.2f}; every q under the deployment's own claim (pmixed.json).")
    return "\n".join(L) + "\n"


def sweep(path: Path, rates, queries: int, seed: int, max_texts: int | None = None) -> list[dict]:
    from dpaudit.canaries.manifest import load_manifest
    from dpaudit.io import read_json
    from dpaudit.pmixed import evaluate as ev
    from dpaudit.pmixed.deployment import Deployment, PMixedSpec
    from dpaudit.tasks import registry

    dep = Deployment.load(path)
    man = load_manifest(path / "canaries.json")
    run = read_json(path / "run.json", "run record", "")
    texts = [r["text"] for r in registry.load_data(run["task"]).test][:max_texts]
    rows = []
    for q in rates:
        dep.spec = PMixedSpec(**{**dataclasses.asdict(dep.spec), "sample_rate": q})
        ppl = ev.perplexity(dep, texts, seed)
        aud = ev.canary_audit(dep, man, seed + 1, queries)
        ex = ev.exact_check(dep, aud["whitebox"], aud["owners"], dep.spec.delta)
        rows.append({"q": q, "betas": list(dep.spec.betas), "perplexity": ppl["pmixed"],
                     "mean_subset_size": ppl["mean_subset_size"], "public": ppl["public"],
                     "ensemble": ppl["ensemble"], **{k: ex[k] for k in (
                         "max_per_query", "median_per_query", "claimed_per_query", "per_query_ratio",
                         "queries_checked", "epsilon_lower")}})
        print(f"q = {q:g}: perplexity {ppl['pmixed']:.2f}, per-query ratio {ex['per_query_ratio']:.3g}", file=sys.stderr)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("deployment", nargs="?", type=Path, help="a PMixED deployment folder")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    ap.add_argument("--rates", default=",".join(map(str, RATES)), help="sampling rates q, comma-separated")
    ap.add_argument("--queries", type=int, default=16, help="canary queries checked exactly per q")
    ap.add_argument("--seed", type=int, default=0, help="evaluation seed (as dpaudit evaluate's)")
    ap.add_argument("--max-texts", type=int, default=None,
                    help="perplexity on the first N held-out records only (default: all, as dpaudit evaluate)")
    ap.add_argument("--table", type=Path, help="print the table of a sweep JSON and exit")
    a = ap.parse_args()
    if a.table:
        sys.stdout.write(table(json.loads(a.table.read_text())["rows"]))
        return
    if a.deployment is None:
        ap.error("give a deployment folder or --table SWEEP.json")
    rows = sweep(a.deployment, [float(x) for x in a.rates.split(",")], a.queries, a.seed, a.max_texts)
    if a.out:
        a.out.write_text(json.dumps({"deployment": str(a.deployment), "max_texts": a.max_texts, "rows": rows},
                                    indent=1) + "\n")
    sys.stdout.write(table(rows))


if __name__ == "__main__":
    main()
