"""The PLD row and the claim check's combined interval, before and after the grid change of issue [5/6].

    python benchmarks/pld_interval_widths.py

"old" is ``dpaudit/accounting/dpa_pld.py`` as of commit a79b735 (read with ``git show``; a 1e-3 rough pass,
then both ends at a grid of 2% of epsilon / T floored at 1e-5, built by dp_accounting's scalar loop); "new" is
the working tree's. Prints a markdown table over the grid of tests/claim/test_claim_check.py plus the three cards of
bench_accounting.py; seconds are each PLD row's own time in this process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpaudit.accounting import dpa_pld, opacus_prv
from dpaudit.accounting.events import SubsampledGaussian

OLD_COMMIT = "a79b735"
POINTS = [(0.6, 0.0145, 300, 1e-5), (2.0, 0.001, 100, 1e-6), (4.0, 0.5, 1000, 1e-5),
          (1.037, 0.0005504, 5000, 1e-5), (1.0, 0.01, 1000, 1e-5), (0.8, 0.004, 10_000, 1e-6),
          (0.8, 0.01, 10_000, 1e-5), (0.5, 0.001, 10_000, 1e-5), (1.5, 0.1, 2000, 1e-7), (0.7, 0.3, 50, 1e-5),
          (0.97, 0.0227, 99, 1e-5), (0.9, 0.004, 20000, 1e-5), (0.8, 0.001, 100000, 1e-5)]


def _old_module():
    src = subprocess.run(["git", "show", f"{OLD_COMMIT}:dpaudit/accounting/dpa_pld.py"], check=True,
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    path = Path(tempfile.mkdtemp()) / "old_dpa_pld.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("old_dpa_pld", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    old = _old_module()
    print("| σ | q | T | δ | old PLD [lo, hi] (s) | new PLD [lo, hi] (s) | PRV [lo, hi] | combined old | combined new |")
    print("|---|---|---|---|---|---|---|---|---|")
    for sig, q, steps, delta in POINTS:
        ev = [SubsampledGaussian(q, sig, steps)]
        t = time.perf_counter()
        o = old.interval(ev, delta)
        to = time.perf_counter() - t
        t = time.perf_counter()
        n = dpa_pld.interval(ev, delta)
        tn = time.perf_counter() - t
        p = opacus_prv.interval(ev, delta)
        co, cn = (max(o[0], p[0]), min(o[1], p[1])), (max(n[0], p[0]), min(n[1], p[1]))
        print(f"| {sig} | {q} | {steps} | {delta:g} | [{o[0]:.5f}, {o[1]:.5f}] ({to:.1f}) | [{n[0]:.5f}, {n[1]:.5f}] "
              f"({tn:.1f}) | [{p[0]:.5f}, {p[1]:.5f}] | [{co[0]:.5f}, {co[1]:.5f}] | [{cn[0]:.5f}, {cn[1]:.5f}] |",
              flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
