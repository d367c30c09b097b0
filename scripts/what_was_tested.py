"""What each committed audit of reports/ tested, under the two-check verdict: the claim re-accounted from the
privacy card committed beside its report.json (every accountant's interval, dpaudit.claim.reaccount) and the empirical check
re-derived from its one-run rows (dpaudit.claim.verdict.empirical). Models are not reloaded; nothing under reports/ is
changed but the table.

Run: `python scripts/what_was_tested.py > reports/what_was_tested/README.md`
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from dpaudit.audit import families
from dpaudit.audit.rows import TestRow
from dpaudit.claim.card import load_card
from dpaudit.claim.reaccount import reaccount
from dpaudit.claim.verdict import Grounds, judge, record_claim

ROOT = Path(__file__).resolve().parents[1]


def card_of(report_file: Path):
    """The privacy card committed beside the report (checkpoint/privacy_card.json)."""
    return load_card(report_file.parent.parent / "checkpoint" / "privacy_card.json")


def main() -> int:
    files = sorted(p for p in ROOT.glob("reports/**/report/report.json"))
    print("# What each committed audit tested\n")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}.\n")
    print(f"Generated {time.strftime('%Y-%m-%d')} by `python scripts/what_was_tested.py > "
          "reports/what_was_tested/README.md` from the committed report.json files (the models are not reloaded): "
          "each claim re-accounted from the privacy card beside its report with every accountant's interval, and the "
          "empirical check re-derived from its one-run rows. Reports written before the two-check verdict "
          "recorded `consistent` whenever the bound was below the claim; the last column is the verdict they "
          "get now.\n")
    print("| report | claimed ε | accounting | true ε in | empirical | audit ceiling | best bound | verdict then | "
          "verdict now |")
    print("|---|---|---|---|---|---|---|---|---|")
    for f in files:
        r = json.loads(f.read_text())
        if r.get("kind") != "evaluation" or r["claim"]["epsilon"] is None:
            continue
        name = str(f.parent.parent.relative_to(ROOT / "reports"))
        try:
            card = card_of(f)
            acct = reaccount(card)
        except Exception as e:  # an old report this script cannot re-account: say so, do not guess
            print(f"| {name} | {r['claim']['epsilon']:.3g} | not re-accounted ({str(e).splitlines()[0]}) | | | | | "
                  f"`{r['verdict']['status']}` | |")
            continue
        rows = [TestRow.from_dict(e) for e in r["empirical"]]
        best, ceiling = families.best(rows, "claimed"), families.ceiling(rows, "claimed")
        record = families.best(rows, "record_claim")  # group privacy's second claim
        v = judge(card, acct, Grounds(best, ceiling, record if record and record_claim(card) else None))
        lo = "?" if acct.lower_epsilon is None else f"{acct.lower_epsilon:.3g}"
        hi = "?" if acct.certified_epsilon is None else f"{acct.certified_epsilon:.3g}"
        print(f"| {name} | {card.claim.epsilon:.3g} | {acct.status} | [{lo}, {hi}] | {v.empirical.status} | "
              f"{ceiling:.2f} | {v.empirical.epsilon_lb:.2f} | `{r['verdict']['status']}` | `{v.status}` |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
