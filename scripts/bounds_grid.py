"""The committed grid of one-run audit bounds (tests/audit/data/bounds_grid.json): Steinke et al.'s epsilon lower
bound, the f-DP (eps, delta) bound and the mu-GDP bound at counts from m = 100 to 10^5, written by the
implementation of the day it was made. tests/audit/test_bounds_grid.py holds every later implementation to
these values within 1e-9 (the speed-ups of issue wave 5 · 5/5 must not move a bound).

Run: `python scripts/bounds_grid.py > tests/audit/data/bounds_grid.json` (from the repository root).
"""

from __future__ import annotations

import json
import sys

from dpaudit.audit import fdp, one_run


def grid() -> list[tuple[int, int, int, float, float]]:
    out = []
    for m in (100, 1000, 10_000, 100_000):
        for rf in (0.02, 0.1, 0.5):
            r = max(2, int(m * rf))
            if r > 20_000:
                continue
            for vf in (0.5, 0.6, 0.75, 0.9, 1.0):
                v = int(round(r * vf))
                for delta in (0.0, 1e-5):
                    out.append((m, r, v, delta, 0.95))
    return out


def main() -> None:
    rows = []
    for m, r, v, delta, conf in grid():
        rows.append({"m": m, "r": r, "v": v, "delta": delta, "confidence": conf,
                     "steinke": one_run.epsilon_lower_bound(m, r, v, delta, conf),
                     "fdp_epsilon": fdp.approx_dp_epsilon_lower_bound(m, r, v, delta, conf),
                     "gdp_mu": fdp.gdp_mu_lower_bound(m, r, v, conf)})
        print(len(rows), file=sys.stderr, end=" ", flush=True)
    json.dump({"made_by": "scripts/bounds_grid.py", "rows": rows}, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
