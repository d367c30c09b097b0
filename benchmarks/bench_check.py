"""How long `dpaudit check` takes to gate a report, against the interpreter's own start-up, in one run.

    python benchmarks/bench_check.py [--report reports/demo/dp-eps8/report/report.json] [--repeats 7]

Times, as whole processes (what a CI job pays), (1) `python -c pass`, (2) `python -c "import torch"` (what
any command that imports torch pays at least), (3) `dpaudit check REPORT --policy configs/policy.toml`.
Runs alternate so machine noise hits all sides alike; medians are printed with the ratios to (1). Target
(wave 2 · 0/7): `dpaudit check` under one second.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _time(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", default="reports/demo/dp-eps8/report/report.json", help="report.json to gate")
    ap.add_argument("--repeats", type=int, default=7, help="timed runs of each command (medians reported)")
    args = ap.parse_args(argv)
    dpaudit = str(Path(sys.executable).with_name("dpaudit"))
    cmds = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "dpaudit check": [dpaudit, "check", args.report, "--policy", "configs/policy.toml"],
    }
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(args.repeats):
        for name, cmd in cmds.items():
            times[name].append(_time(cmd))
    base = statistics.median(times["python -c pass"])
    print(f"{'command':28s} {'median s':>9s} {'x python':>9s}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:28s} {m:9.3f} {m / base:9.1f}")
    check = statistics.median(times["dpaudit check"])
    print(f"dpaudit check under 1 s: {'yes' if check < 1.0 else 'NO'} ({check:.3f} s)")
    return 0 if check < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
