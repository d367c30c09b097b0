"""``dpaudit account --card`` wall time: the first call on a machine (every accountant computes) against the
same call again (the answers read from the on-disk cache, dpaudit/accounting/disk_cache.py), each in a fresh
process, for cards of 99, 20,000 and 100,000 steps.

    python benchmarks/bench_accounting.py [--repeats 3]

Each repeat uses an empty cache folder for the cold call, then calls twice more with it; medians and the ratio
cold / cached (> 1: the cache is faster) are printed as a markdown table, with whether torch was imported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CARDS = {"99 steps (demo)": (0.0227, 0.97, 99), "20,000 steps": (0.004, 0.9, 20_000), "100,000 steps": (0.001, 0.8, 100_000)}


def _card(folder: Path, q: float, sigma: float, steps: int) -> Path:
    from dpaudit.cli import main

    out = folder / f"card_{steps}.json"
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        main(["card", "--sigma", str(sigma), "--sample-rate", str(q), "--steps", str(steps), "--delta", "1e-5",
              "--accountant", "prv", "--epsilon", "1000", "--out", str(out)])
    return out


def _call(card: Path, cache: Path) -> tuple[float, bool]:
    code = ("import sys\nfrom dpaudit.cli import main\n"
            f"main(['account', '--card', {str(card)!r}])\nprint('TORCH' if 'torch' in sys.modules else 'NOTORCH')\n")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"DPAUDIT_CACHE": str(cache), "PATH": "/usr/bin:/bin"})
    dt = time.perf_counter() - t0
    return dt, r.stdout.strip().endswith("TORCH") and not r.stdout.strip().endswith("NOTORCH")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rows = ["| card | cold (s) | cached (s) | cold / cached | torch imported (cold, cached) |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        for name, (q, sigma, steps) in CARDS.items():
            card = _card(d, q, sigma, steps)
            cold, warm, torch_flags = [], [], set()
            for i in range(args.repeats):
                cache = d / f"cache_{steps}_{i}"
                t, tc = _call(card, cache)
                cold.append(t)
                t2, tw = _call(card, cache)
                warm.append(t2)
                torch_flags.add((tc, tw))
            c, w = statistics.median(cold), statistics.median(warm)
            flags = ", ".join(f"{'yes' if a else 'no'}, {'yes' if b else 'no'}" for a, b in sorted(torch_flags))
            rows.append(f"| {name} | {c:.2f} | {w:.2f} | {c / w:.1f}x | {flags} |")
    print("\n".join(rows))
    print(json.dumps({"repeats": args.repeats}))


if __name__ == "__main__":
    main()
