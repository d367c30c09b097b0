"""Write the date and machine of every committed report folder into its README, from its own report.json files.

    python scripts/report_provenance.py [--check]

For each ``reports/<name>/README.md``, the report.json files under that folder give the dates the evaluations
were written (``generated_at``) and the machine (``reproducibility.machine`` and the package versions); one
line starting with "Date and machine" right under the title states them (replaced when present). ``--check``
exits 1 when a README's line is missing or stale. Folders without report.json files are listed, not changed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "reports"
MARK = "Date and machine"


def provenance(folder: Path) -> str | None:
    dates, machines, torch = set(), set(), set()
    for f in folder.rglob("report.json"):
        try:
            r = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        for rep in (r.get("variants") or {}).values() if r.get("kind") == "comparison" else [r]:
            if rep.get("generated_at"):
                dates.add(rep["generated_at"][:10])
            repro = rep.get("reproducibility") or {}
            m = repro.get("machine") or {}
            if m:
                gpu = m.get("accelerator")
                machines.add(f"{m.get('processor', '?')}, {m.get('cpus', '?')} CPUs"
                             + (f" and an {gpu} (a lent GPU machine)" if gpu else " (the project's CPU machine)"))
            v = (repro.get("versions") or {}).get("torch")
            if v:
                torch.add(v)
    if not dates:
        return None
    span = min(dates) if len(dates) == 1 else f"{min(dates)} to {max(dates)}"
    return (f"{MARK} (from this folder's report.json files): written {span}; {'; '.join(sorted(machines)) or '?'}"
            f"; torch {', '.join(sorted(torch)) or '?'}.{calibration(folder)}")


def calibration(folder: Path) -> str:
    """Which accountant wrote each private card's claim (for the Gaussian methods, the one that calibrated σ),
    beside each method's paper's own (dpaudit.options.PAPER_ACCOUNTANT)."""
    from dpaudit.options import PAPER_ACCOUNTANT

    used: dict[str, set] = {}
    for f in folder.rglob("privacy_card.json"):
        try:
            c = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if (c.get("claim") or {}).get("epsilon") is None:
            continue
        used.setdefault(c.get("method", "?"), set()).add(c["claim"].get("accountant", "?"))
    if not used:
        return ""
    own = {**PAPER_ACCOUNTANT, "lmo_dp": "lmo_paper", "pmixed": "pmixed_paper"}  # their own analyses claim
    parts = [f"{m}: {'/'.join(sorted(a))} (paper: {own.get(m, '?')})" for m, a in sorted(used.items())]
    return " Claims written (σ calibrated) by " + "; ".join(parts) + "."


def updated(text: str, line: str) -> str:
    lines = text.splitlines()
    for i, x in enumerate(lines):  # drop the old line and the blank line written after it
        if x.startswith(MARK):
            del lines[i: i + (2 if i + 1 < len(lines) and not lines[i + 1].strip() else 1)]
            break
    title = next((i for i, x in enumerate(lines) if x.startswith("# ")), -1)
    lines[title + 1:title + 1] = ["", line] if title >= 0 else [line, ""]
    if title >= 0 and title + 3 < len(lines) and lines[title + 3].strip():
        lines.insert(title + 3, "")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a README's line is missing or stale")
    args = ap.parse_args(argv)
    stale, skipped = [], []
    for readme in sorted(ROOT.glob("*/README.md")):
        line = provenance(readme.parent)
        if line is None:
            skipped.append(readme.parent.name)
            continue
        text = readme.read_text()
        new = updated(text, line)
        if new != text:
            stale.append(readme.parent.name)
            if not args.check:
                readme.write_text(new)
    if skipped:
        print("no report.json (left as they are):", ", ".join(skipped))
    if stale:
        print(("stale: " if args.check else "updated: ") + ", ".join(stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
