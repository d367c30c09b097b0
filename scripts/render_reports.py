"""REPORT.md of every committed evaluation, re-rendered from its report.json by the current renderer
(dpaudit/report/markdown.py): the numbers are the run's, the layout today's. The images a REPORT.md shows are the PNGs
already beside it; PMixED deployments and comparisons keep their own renderers.

Run: `python scripts/render_reports.py [--check]` (from the repository root; --check exits 1 when a committed
REPORT.md differs from what the renderer prints, writing nothing).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from dpaudit.report.markdown import render_markdown

ROOT = Path(__file__).resolve().parents[1]


def rendered(md: Path) -> str | None:
    """What the renderer prints for the report beside ``md`` (None: not a checkpoint's evaluation)."""
    r = json.loads((md.parent / "report.json").read_text())
    if r.get("kind") != "evaluation" or "pmixed" in r:
        return None
    return render_markdown(r, re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md.read_text()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="Report differences and exit 1 instead of writing.")
    args = ap.parse_args(argv)
    stale = []
    for md in sorted((ROOT / "reports").glob("**/report/REPORT.md")):
        new = rendered(md)
        if new is None or new == md.read_text():
            continue
        stale.append(md.relative_to(ROOT))
        if not args.check:
            md.write_text(new)
    if args.check and stale:
        print(f"{len(stale)} REPORT.md files differ from the renderer, e.g. {stale[0]}; run scripts/render_reports.py")
        return 1
    print(f"{len(stale)} REPORT.md files {'differ' if args.check else 're-rendered'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
