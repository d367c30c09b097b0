"""Noise calibration: the interpolated threshold search against plain bisection, in one run.

    PYTHONPATH=. python benchmarks/bench_calibration.py [--quick]

For each mechanism of a grid (q, steps, target ε, δ) and each accountant that calibrates σ, computes σ twice with
the accounting cache off: by today's search (:func:`dpaudit.accounting.search.threshold`) and by plain bisection
(:func:`dpaudit.accounting.search.bisect`, the search before it), counting the accountant's passes and timing both.
The two σ must be the same float (exit 1 otherwise). Prints a markdown table with the ratios.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from datetime import date

import dpaudit.accounting as A
from dpaudit.accounting import search

GRID = [  # (q, steps, target epsilon, delta)
    (0.01, 1000, 1.0, 1e-5), (0.01, 1000, 8.0, 1e-5), (0.0625, 16, 8.0, 1e-5), (1.0, 10, 4.0, 1e-5),
    (0.001, 10_000, 3.0, 1e-6), (0.1, 300, 0.5, 1e-5), (0.25, 40, 2.0, 1e-5), (0.004, 5000, 6.0, 1e-7),
]
QUICK = GRID[:3]


def _once(mech, accountant, bisection: bool) -> tuple[float, int, float]:
    q, steps, target, delta = mech
    calls = [0]
    real = A.epsilon_function

    def counting(name):
        f = real(name)

        def g(*a, **k):
            calls[0] += 1
            return f(*a, **k)
        return g

    A.epsilon_function = counting
    saved = search.threshold
    if bisection:
        search.threshold = lambda value, target, lo, hi, tol, known=None: search.bisect(
            lambda s: value(s) > target, lo, hi, tol)  # as before: the end lo was computed by the caller
    t = time.perf_counter()
    try:
        sigma = A._calibrate_sigma(target, delta, q, steps, accountant)
    finally:
        A.epsilon_function, search.threshold = real, saved
    return sigma, calls[0], time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="three mechanisms, not eight")
    ap.add_argument("--accountants", default="prv,pld,rdp,dpa_rdp", help="comma-separated")
    a = ap.parse_args(argv)
    warnings.filterwarnings("ignore")  # Opacus' and PRV's numerical warnings at extreme orders, not this benchmark's
    os.environ["DPAUDIT_ACCOUNTING_CACHE"] = "0"  # every epsilon computed (calibrations are not cached here anyway)
    rows, bad, tot = [], 0, [0.0, 0.0, 0, 0]
    for mech in (QUICK if a.quick else GRID):
        for acc in a.accountants.split(","):
            s_new, n_new, t_new = _once(mech, acc, False)
            s_old, n_old, t_old = _once(mech, acc, True)
            same = s_new == s_old
            bad += not same
            tot = [tot[0] + t_new, tot[1] + t_old, tot[2] + n_new, tot[3] + n_old]
            rows.append(f"| {mech[0]:g} | {mech[1]} | {mech[2]:g} | {mech[3]:g} | {acc} | {s_new!r} | "
                        f"{'yes' if same else 'NO: ' + repr(s_old)} | {n_old} → {n_new} | {t_old:.2f} s → {t_new:.2f} s "
                        f"| {t_old / t_new:.2f}× |")
    print(f"Command: `PYTHONPATH=. python benchmarks/bench_calibration.py{' --quick' if a.quick else ''}`; "
          f"{date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          "the accounting cache off; each σ by the search first, then by bisection (a process-level cache, if any, favours bisection).\n")
    print("| q | steps | target ε | δ | accountant | σ | same σ as bisection | passes (bisection → search) | time | "
          "speed-up |\n|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nIn all: {tot[3]} → {tot[2]} accountant passes, {tot[1]:.1f} s → {tot[0]:.1f} s "
          f"({tot[1] / tot[0]:.2f}×); σ differing from bisection's: {bad}.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
