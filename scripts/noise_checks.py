"""The white-box noise check (dpaudit/audit/noise_check.py) of every committed checkpoint that kept its per-step
canary projections: how much noise its recorded updates carry at most (95%), against the card's sigma, and how
much the records' own gradients spread the projections beyond it. From the committed files alone (no model is
loaded); non-private runs have no sigma to check and are left out.

    python scripts/noise_checks.py reports/demo reports/demo_lm reports/li_repro_sentiment > reports/bench/noise_checks.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

CONFIDENCE = 0.95


def rows(folder: Path) -> list[str]:
    from dpaudit.claim.card import card_from_dict
    from dpaudit.evaluation import scoring
    from dpaudit.evaluation.evidence import noise_checks

    out = []
    for card_file in sorted(folder.glob("*/checkpoint/privacy_card.json")):
        card = json.loads(card_file.read_text())
        ck = card_file.parent
        wbs = {w["name"]: w for w in scoring.whitebox(ck, card_from_dict(card).audited_mechanism()) or []}
        for c in noise_checks(list(wbs.values()), CONFIDENCE):
            # each step an inserted canary was sampled adds 1 to its projection: in expectation sum(times_sampled)
            # of the sum of squares; what is left above sigma^2 is the records' own gradients
            own = float(np.sum(wbs[c["attack"]]["times_sampled"])) / c["values"]
            records = np.sqrt(max(c["rms"] ** 2 - own, 0.0)) / c["noise_multiplier"]
            out.append(f"| {folder.name}/{ck.parent.name} | {card['claim']['epsilon']:.3g} | {card.get('trainable')} | "
                       f"{c['kind']} | {c['steps']} × {c['m']} | {c['noise_multiplier']:.4f} | {c['rms']:.4f} | "
                       f"{c['ratio']:.3f} | {records:.3f} | {c['upper']:.4f} | {c['status']} |")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    lines = ["| run | claimed ε | trainable | canaries | updates × canaries | card's σ | projections' rms | rms / σ | "
             f"without the canaries' own steps | noise added ≤ ({CONFIDENCE:.0%}) | check |", "|---" * 11 + "|"]
    for a in argv:
        lines += rows(Path(a))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
