"""The probe's conformance table (reports/probe/conformance.md): every honest loop of experiments/probe_loops.py
must train to the end with the probe attached and pass the gate; every planted bug must make the gate's FAIL line
name the check that catches it; and how many steps the online checks needed to flag it.

    nice python experiments/probe_conformance.py --seeds 20 --out reports/probe

Each run trains one loop (``experiments/probe_loops.py``: a tiny model, 500 synthetic records, about 200 noisy
steps), saves the probe's record, reads it back as ``dpaudit evaluate`` does (``dpaudit.evaluation.scoring.whitebox``), runs
the mechanism checks against the card (``dpaudit.evaluation.evidence.mechanism_checks``) and applies the gate's default policy
to them (``dpaudit.gate.mechanism_rules.failures``, what ``dpaudit check`` runs on report.json's mechanism checks). The
black-box attacks, which no loop pattern changes, are left out. Writes ``conformance.json`` (a row per run) and
``conformance.md`` (the table) into OUT.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parents[1]


def loops():
    spec = importlib.util.spec_from_file_location("probe_loops", ROOT / "experiments" / "probe_loops.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["probe_loops"] = mod
    spec.loader.exec_module(mod)
    return mod


def judge(folder: Path, card) -> tuple[list[dict], list[str]]:
    """(the mechanism checks of the record in ``folder`` against ``card``, the gate's FAIL lines for them)."""
    from dpaudit.evaluation import evidence, scoring
    from dpaudit.gate import mechanism_rules

    checks = [e.as_dict() for e in evidence.mechanism_checks(scoring.whitebox(folder), card)]  # as report.json holds them
    return checks, mechanism_rules.failures("run", {"mechanism_checks": checks}, None, False)


def one(pl, loop: str, bug: str | None, seed: int, work: Path, settings=None) -> dict:
    """The row of one run: trained, its record judged as the gate judges it (a crash recorded, never hidden)."""
    t0 = time.time()
    folder = work / f"{loop}-{bug or 'honest'}-{seed}"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            probe, card, _ = pl.run(loop, bug, seed, folder, settings)
    except Exception as e:  # a crash is what this table is for: record it, never hide it
        return _crash(loop, bug, seed, e, t0)
    return _row(pl, loop, bug, seed, probe, card, folder, t0)


def many(pl, cases: list, work: Path, settings=None) -> list[dict]:
    """The rows of ``cases`` ``(loop, bug, seed)``, as :func:`one` gives them, in their order; the runs of loops on
    several ranks share one spawn of the ranks (``pl.run_distributed``). A shared spawn that fails is re-run case
    by case, so a crash lands on the run that crashed."""
    rows: dict = {}
    spread = [c for c in cases if pl.distributed(c[0], c[1]) is not None]
    if spread:
        t0 = time.time()
        folders = [work / f"{loop}-{bug or 'honest'}-{seed}" for loop, bug, seed in spread]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = pl.run_distributed([(*c, f) for c, f in zip(spread, folders)], settings or pl.Settings())
        except Exception:
            got = None
        if got is not None:
            share = (time.time() - t0) / len(spread)
            for c, (probe, card, folder) in zip(spread, got):
                rows[c] = _row(pl, *c, probe, card, folder, time.time() - share)
    return [rows[c] if c in rows else one(pl, *c, work, settings) for c in cases]


def _crash(loop, bug, seed, e: Exception, t0: float) -> dict:
    return {"loop": loop, "bug": bug, "seed": seed, "crash": f"{type(e).__name__}: {e}",
            "trace": traceback.format_exc(limit=-4), "seconds": round(time.time() - t0, 1)}


def _row(pl, loop, bug, seed, probe, card, folder: Path, t0: float) -> dict:
    row = {"loop": loop, "bug": bug, "seed": seed}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            checks, fails = judge(folder, card)
    except Exception as e:  # the record could not be judged: a crash of the run's own
        return _crash(loop, bug, seed, e, t0)
    statuses = {c["check"]: c["status"] for e in checks for c in e["checks"]}
    named = pl.BUGS[bug][1] if bug else None
    alarms = probe.online.alarms
    return {**row, "steps": probe.steps, "checks": statuses, "fail_lines": fails, "gate_exit": 1 if fails else 0,
            "named_fail_line": bool(named) and any(f"mechanism check '{named}'" in f for f in fails),
            "online_alarm_step": {k: v["step"] for k, v in alarms.items()},
            "online_named_step": alarms.get(named, {}).get("step") if named else None,
            "seconds": round(time.time() - t0, 1)}


def rate(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci(0.95, method="exact") if n else None
    return f"{k}/{n} [{ci.low:.0%}, {ci.high:.0%}]" if n else "—"


def table(rows: list[dict], pl) -> str:
    out = ["## Honest loops", "", "| loop | pattern | runs | crashes | gate passes | checks not tested (runs) | "
           "online false alarms |", "|---|---|---|---|---|---|---|"]
    for name, loop in pl.LOOPS.items():
        rs = [r for r in rows if r["loop"] == name and r["bug"] is None]
        if not rs:
            continue
        crashes = sum("crash" in r for r in rs)
        ok = [r for r in rs if "crash" not in r]
        nt = {}
        for r in ok:
            for c, st in r["checks"].items():
                nt[c] = nt.get(c, 0) + (st == "not tested")
        out.append(f"| `{name}` | {loop.source} | {len(rs)} | {crashes} | {rate(sum(r['gate_exit'] == 0 for r in ok), len(rs))}"
                   f" | {', '.join(f'{c} ({k})' for c, k in nt.items() if k) or '—'} | "
                   f"{sum(bool(r['online_alarm_step']) for r in ok)} |")
    out += ["", "## Planted bugs (in the Opacus tutorial loop; `bug@loop` in that loop; a bug of the ranks in the DDP "
            "loop; a peer library's in its own loop)", "",
            "| bug | what | check that must name it | runs | detected (FAIL line naming it) | online: flagged | "
            "online: median step of detection (of the run's steps) |", "|---|---|---|---|---|---|---|"]
    for bug, (what, check) in pl.BUGS.items():
        rs = [r for r in rows if r["bug"] == bug]
        if not rs:
            continue
        ok = [r for r in rs if "crash" not in r]
        det = sum(r["named_fail_line"] for r in ok)
        steps = [r["online_named_step"] for r in ok if r["online_named_step"]]
        med = (f"{np.median(steps):.0f} of {np.median([r['steps'] for r in ok]):.0f}" if steps else "— (post-training only)")
        out.append(f"| `{bug}` | {what} | `{check}` | {len(rs)} | {rate(det, len(rs))} | {len(steps)}/{len(rs)} | {med} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="Seeds per honest loop and per bug.")
    ap.add_argument("--out", type=Path, required=True, help="Folder for conformance.json and conformance.md.")
    ap.add_argument("--loops", default="all", help="Comma-separated honest loops to run (default: all; 'none' for none).")
    ap.add_argument("--bugs", default="all", help="Comma-separated bugs to run (default: all; 'none' for none).")
    ap.add_argument("--append", action="store_true",
                    help="Add these runs to OUT's conformance.json (a run of the same loop, bug and seed is replaced) "
                         "and re-render the table from all of them; the commands are listed together.")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="Re-render OUT's table from this conformance.json (no training); the date and command are "
                         "the JSON's.")
    args = ap.parse_args(argv)
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
        write(args.out, data["rows"], data["command"], data["date"], data["seconds"], loops())
        return 0
    from dpaudit.progress import set_quiet

    set_quiet(True)
    pl = loops()
    names = list(pl.LOOPS) if args.loops == "all" else [x for x in args.loops.split(",") if x and x != "none"]
    bugs = list(pl.BUGS) if args.bugs == "all" else [x for x in args.bugs.split(",") if x and x != "none"]
    unknown = [n for n in names if n not in pl.LOOPS] + [b for b in bugs if b not in pl.BUGS]
    if unknown:
        print(f"error: unknown loop or bug {', '.join(unknown)}; see experiments/probe_loops.py", file=sys.stderr)
        return 2
    jobs = [(n, None) for n in names] + [(pl.loop_of(b), b) for b in bugs]
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i, (loop, bug) in enumerate(jobs):
            rows += many(pl, [(loop, bug, seed) for seed in range(args.seeds)], Path(tmp))
            last = rows[-args.seeds:]
            print(f"[{i + 1}/{len(jobs)}] {loop} {bug or 'honest'}: crashes {sum('crash' in r for r in last)}, gate "
                  f"exit 1 in {sum(r.get('gate_exit', 0) for r in last)} ({time.time() - t0:.0f} s)", flush=True)
    cmd = "nice python experiments/probe_conformance.py " + " ".join(argv if argv is not None else sys.argv[1:])
    seconds = round(time.time() - t0)
    if args.append and (args.out / "conformance.json").exists():
        old = json.loads((args.out / "conformance.json").read_text())
        new = {(r["loop"], r["bug"], r["seed"]) for r in rows}
        rows = [r for r in old["rows"] if (r["loop"], r["bug"], r["seed"]) not in new] + rows
        cmd, seconds = f"{old['command']}` + `{cmd}", old["seconds"] + seconds
    write(args.out, rows, cmd, time.strftime("%Y-%m-%d"), seconds, pl)
    print(f"wrote {args.out / 'conformance.md'}")
    return 0


def compact(rows: list[dict]) -> list[dict]:
    """The committed rows: a crash keeps its trace; FAIL lines are cut at 160 characters (the check they name
    comes first)."""
    return [{**{k: v for k, v in r.items() if k != "trace" or "crash" in r},
             **({"fail_lines": [f[:160] for f in r["fail_lines"]]} if "fail_lines" in r else {})} for r in rows]


def write(out: Path, rows: list[dict], cmd: str, date: str, seconds: int, pl) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = compact(rows)
    body = ",\n".join(json.dumps(r, separators=(",", ":")) for r in rows)
    (out / "conformance.json").write_text(json.dumps({"command": cmd, "date": date, "seconds": seconds,
                                                      "rows": []})[:-2] + "\n" + body + "]}\n")
    head = (f"# The probe on real loop patterns\n\nMade by `{cmd}` on {date} (the project's 2-core CPU machine, "
            f"{seconds} s). Rates with exact 95% intervals. Each check's false-alarm rate is stated in docs/probe.md; "
            "together the statistical ones fail an honest run at most 0.4% of the time, the online ones at most "
            "0.1%.\n\n")
    (out / "conformance.md").write_text(head + table(rows, pl))


if __name__ == "__main__":
    sys.exit(main())
