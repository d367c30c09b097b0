"""The bug-injection table of reports/probe/README.md: how often each planted bug makes the CI gate fail with a
FAIL line naming it, and how often an honest loop is flagged.

    nice python experiments/probe_bugs.py --seeds 20 --out reports/probe

Every run trains the external Opacus loop of examples/audit_external_opacus.py (the example's own ``train``,
small settings: a 1-layer-wide tiny GPT-2 on 1,000 public sentences, B = 110, 4 epochs, epsilon = 8, the probe's
1,000 canaries), evaluates it with ``dpaudit.api.evaluate`` (black-box canaries, white-box probe and mechanism
checks) and applies the gate's default policy (``dpaudit.gate.policy.check``, what ``dpaudit check`` runs). A bug counts
as detected when the gate fails with a FAIL line for the mechanism check that names it; the honest loop counts as
flagged when any mechanism check fails. Writes ``runs.json`` (one row per run) and ``README.md``'s table
(``table.md``) into OUT.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
import time
from pathlib import Path

from scipy.stats import binomtest

from dpaudit import api
from dpaudit.gate import policy
from dpaudit.progress import set_quiet

ROOT = Path(__file__).resolve().parents[1]
NAMED = {"none": None, "half-noise": "noise", "no-clip": "clipping", "wrong-rate": "sampling",
         "accumulation": "sampling", "divisor": "divisor"}
SETTINGS = ["--insecure-rng", "--epsilon", "8", "--records", "1000", "--canaries", "20", "--references", "100",
            "--secret-length", "3", "--width", "32", "--batch-size", "110", "--epochs", "4"]


def example():
    spec = importlib.util.spec_from_file_location("audit_external_opacus", ROOT / "examples" / "audit_external_opacus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one(ex, bug: str, seed: int, work: Path) -> dict:
    args = ex.parser().parse_args([*SETTINGS, "--bug", bug, "--seed", str(seed), "--out", str(work / f"{bug}-{seed}")])
    t0 = time.time()
    plain, tok, card, manifest, model_dir = ex.train(args)
    report = api.evaluate(plain, tok, card, manifest, max_len=32, probe=model_dir)
    fails = policy.check(report, policy.Policy())
    checks = {c["check"]: c["status"] for e in report["mechanism_checks"] for c in e["checks"]}
    wb = next(e for e in report["empirical"] if e["attack"] == "whitebox_gradient" and e["delta_kind"] == "claimed")
    limit = next((x.get("mechanism_limit") or {} for x in report["audit_limits"] if x["attack"] == "whitebox_gradient"),
                 {})
    named = NAMED[bug]
    return {"bug": bug, "seed": seed, "gate_exit": 1 if fails else 0, "checks": checks,
            "named_fail_line": bool(named) and any(f"mechanism check '{named}'" in f for f in fails),
            "any_mechanism_fail": any(s == "fail" for s in checks.values()), "fail_lines": fails,
            "whitebox_bound": wb["epsilon_lb"], "card_mechanism_limit": limit.get("epsilon_lb"),
            "seconds": round(time.time() - t0, 1)}


def interval(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    return f"{k}/{n} = {k / n:.0%} [{ci.low:.0%}, {ci.high:.0%}]"


def table(rows: list[dict]) -> str:
    lines = ["| loop | runs | gate exit 1 | FAIL line naming the bug (detection) | honest flagged (false alarm) | "
             "checks failing (runs) |", "|---|---|---|---|---|---|"]
    for bug in NAMED:
        rs = [r for r in rows if r["bug"] == bug]
        if not rs:
            continue
        n = len(rs)
        gate = sum(r["gate_exit"] for r in rs)
        counts = {}
        for r in rs:
            for c, s in r["checks"].items():
                counts[c] = counts.get(c, 0) + (s == "fail")
        failing = ", ".join(f"{c} ({k})" for c, k in counts.items() if k) or "none"
        det = interval(sum(r["named_fail_line"] for r in rs), n) if NAMED[bug] else "—"
        fa = interval(sum(r["any_mechanism_fail"] for r in rs), n) if not NAMED[bug] else "—"
        lines.append(f"| {bug if bug != 'none' else 'honest'} | {n} | {gate} | {det} | {fa} | {failing} |")
    honest = [r for r in rows if r["bug"] == "none" and r["card_mechanism_limit"]]
    if honest:
        ratios = sorted(r["whitebox_bound"] / r["card_mechanism_limit"] for r in honest)
        lines += ["", f"Honest loops: white-box one-run bound / the card mechanism's median one-run limit (same m): "
                      f"median {ratios[len(ratios) // 2]:.0%}, range {ratios[0]:.0%}–{ratios[-1]:.0%} over {len(ratios)} "
                      "runs."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="Seeds per loop (honest and each bug).")
    ap.add_argument("--out", type=Path, required=True, help="Folder for runs.json and table.md.")
    ap.add_argument("--bugs", default=",".join(NAMED), help="Comma-separated loops to run (default: all).")
    args = ap.parse_args(argv)
    bugs = args.bugs.split(",")
    bad = [b for b in bugs if b not in NAMED]
    if bad:
        ap.error(f"unknown bug {bad[0]!r}; choose from {', '.join(NAMED)}")
    set_quiet(True)
    ex = example()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            for bug in bugs:
                rows.append(one(ex, bug, seed, Path(tmp)))
                r = rows[-1]
                print(f"{bug} seed {seed}: gate {r['gate_exit']}, checks "
                      f"{','.join(c for c, s in r['checks'].items() if s == 'fail') or '-'} ({r['seconds']} s)",
                      flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "runs.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.out / "table.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
