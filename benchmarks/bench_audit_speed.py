"""The one-run audit statistics against their slow baseline, in one run (issue wave 5 · 5/5, item 2).

    python benchmarks/bench_audit_speed.py [--quick]

Times, on the same machine and in the same process, (1) the f-DP (eps, delta) and mu-GDP bounds and Steinke et
al.'s bound for a set of guess counts at m = 10^4, by today's code (dpaudit/audit/fdp.py, one_run.py) and by the
baseline before the speed-ups (benchmarks/reference_bounds.py: the full f-DP recursion for every curve, SciPy's
binomial pmf at every bisection step); (2) one simulated `dpaudit audit strategy` audit of all four strategies at
m = 10^4 (gaussian:1), both ways, and the two-sample test's plan (every Clopper-Pearson bound by SciPy, as before
it read each count's once); (3) the command `dpaudit audit scores --strategy S` end to end for every strategy at m = 10^5 and 10^6
(a JSON file of simulated scores; the process's start, the file's reading, the bounds, the TPR and the AUC's
bootstrap interval included; the baseline's search at 10^5 took 37.7 s, issue text). Every bound is compared with the
baseline's (within 1e-9) before it is timed. Prints a markdown table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import reference_bounds as ref  # noqa: E402

from dpaudit.audit import fdp, one_run, simulated, strategy_plan  # noqa: E402


def _clear() -> None:
    for f in (one_run.epsilon_lower_bound, one_run.ceiling, one_run._binomial_terms,
              fdp.approx_dp_epsilon_lower_bound, fdp.gdp_mu_lower_bound):
        f.cache_clear()


def _counts(m: int, n: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(n):
        r = int(rng.integers(m // 50, m // 4))
        out.append((r, int(r * rng.uniform(0.55, 0.95))))
    return out


def bounds(m: int, counts, delta: float) -> list[tuple[str, float, float]]:
    rows = []
    for name, new, old in (
            ("f-DP (eps, delta) bound", lambda r, v: fdp.approx_dp_epsilon_lower_bound(m, r, v, delta),
             lambda r, v: ref.approx_dp_epsilon_lower_bound(m, r, v, delta)),
            ("mu-GDP bound", lambda r, v: fdp.gdp_mu_lower_bound(m, r, v), lambda r, v: ref.gdp_mu_lower_bound(m, r, v)),
            ("Steinke et al. bound", lambda r, v: one_run.epsilon_lower_bound(m, r, v, delta),
             lambda r, v: ref.epsilon_lower_bound(m, r, v, delta))):
        _clear()
        t = time.perf_counter()
        a = [new(r, v) for r, v in counts]
        t_new = time.perf_counter() - t
        t = time.perf_counter()
        b = [old(r, v) for r, v in counts]
        t_old = time.perf_counter() - t
        worst = max(abs(x - y) for x, y in zip(a, b))
        assert worst <= 1e-9, (name, worst)
        rows.append((f"{name}, m = {m:,}, {len(counts)} counts (max |new - old| = {worst:.1e})", t_old, t_new))
    return rows


def strategy(m: int) -> tuple[str, float, float]:
    mech = simulated.parse("gaussian:1")
    _clear()
    t = time.perf_counter()
    new = strategy_plan.choose(mech, m, sims=1)["medians"]
    t_new = time.perf_counter() - t
    saved = (one_run.epsilon_lower_bound, fdp.approx_dp_epsilon_lower_bound, fdp.gdp_mu_lower_bound)
    try:  # the baseline: the same simulation with the old bounds in place of today's
        one_run.epsilon_lower_bound = ref.epsilon_lower_bound
        fdp.approx_dp_epsilon_lower_bound = ref.approx_dp_epsilon_lower_bound
        fdp.gdp_mu_lower_bound = ref.gdp_mu_lower_bound
        t = time.perf_counter()
        old = strategy_plan.choose(mech, m, sims=1)["medians"]
        t_old = time.perf_counter() - t
    finally:
        one_run.epsilon_lower_bound, fdp.approx_dp_epsilon_lower_bound, fdp.gdp_mu_lower_bound = saved
    assert all(abs(new[k] - old[k]) <= 1e-9 for k in new), (new, old)
    return f"one simulated `audit strategy` audit, 4 strategies, m = {m:,}", t_old, t_new


def plan_rows() -> tuple[str, float, float]:
    """The two-sample test's plan (run by every evaluation with block canaries, and by `dpaudit audit plan`): its
    15 x 2,001 simulated audits on one card, today's code against the baseline's, on the same simulated pools."""
    from dpaudit.audit import two_sample as ts

    args = (0.01, 0.735, 1000, 500, 500, 1e-5, 0.95, 0, 25_000)  # q, sigma, T, n_in, n_out, delta, confidence, seed, pool
    ts._card_pools(*args[:3], args[7], args[8])  # the pools both read: drawn once, before either is timed
    ts._plan_rows.cache_clear()
    t = time.perf_counter()
    new = ts._plan_rows(*args)
    t_new = time.perf_counter() - t
    t = time.perf_counter()
    old = ref.two_sample_plan_rows(*args)
    t_old = time.perf_counter() - t
    assert new == old, (new, old)
    return "the two-sample plan's simulated audits (q = 0.01, sigma = 0.735, T = 1,000, 500 + 500 canaries)", t_old, t_new


def scores(m: int, names) -> list[tuple[str, float]]:
    """The command a user runs, end to end (its start, reading the file, every number it prints: the bounds, the
    TPR and the AUC's bootstrap interval), on a JSON file of m simulated scores."""
    rng = np.random.default_rng(1)
    s = rng.choice([-1, 1], size=m)
    sc = rng.normal(size=m) + 0.5 * (s > 0)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scores.json"
        path.write_text(json.dumps({"scores": sc.round(6).tolist(), "inserted": (s > 0).tolist()}))
        for name in names:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "dpaudit.cli", "audit", "scores", str(path), "--strategy", name,
                            "--delta", "1e-5"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
            out.append((f"`dpaudit audit scores --strategy {name}`, m = {m:,}", time.perf_counter() - t))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer counts and no m = 10^6 (the suite's smoke run)")
    args = ap.parse_args(argv)
    n = 4 if args.quick else 20
    print(f"machine: {platform.machine()}, {platform.processor() or '?'}, Python {platform.python_version()}")
    print("\n| what | baseline (s) | today (s) | speed-up |\n|---|---|---|---|")
    rows = bounds(10_000, _counts(10_000, n), 1e-5)
    if not args.quick:
        rows += [strategy(10_000), plan_rows()]
    for name, old, new in rows:
        print(f"| {name} | {old:.3f} | {new:.3f} | {old / new:.1f}× |")
    sizes = [10 ** 4] if args.quick else [10 ** 5, 10 ** 6]
    print("\n| what (today's code, the whole command) | seconds |\n|---|---|")
    for m in sizes:
        for name, sec in scores(m, ["fixed", "held-out", "search", "median"]):
            print(f"| {name} | {sec:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
