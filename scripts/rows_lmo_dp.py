"""The table of reports/lmo_dp/README.md, printed from its committed per-variant report.json, run.json and
privacy_card.json files: test accuracy with a 95% Wilson interval beside the constant predictor's, the noise per
coordinate (std / C), the claimed epsilon and what produced it, dpaudit's re-accounted epsilon, the white-box
bounds of the Dirac and the dense gradient canaries (at the claim's delta, 95% family confidence, with their
ceiling), the best black-box bound and the verdict; then LMO-DP's accuracy against each control with Newcombe's
95% interval for the difference.
Run: `python scripts/rows_lmo_dp.py [DIR] > reports/lmo_dp/rows.md` (DIR defaults to reports/lmo_dp).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpaudit.run_folder import from_argv
from dpaudit.table import newcombe, wilson

RUN = from_argv(__doc__, Path(__file__).resolve().parents[1] / "reports" / "lmo_dp")
VARIANTS = ["lmo-eps0p3", "laplace-fixed-eps0p63", "gauss-eps0p63", "gauss-eps0p3", "lmo-eps3", "gauss-eps3",
            "gauss-eps14p2"]
CONTROLS = {"lmo-eps0p3": ["laplace-fixed-eps0p63", "gauss-eps0p63", "gauss-eps0p3"],
            "lmo-eps3": ["gauss-eps3", "gauss-eps14p2"]}


def load(v: str):
    if not RUN.has_report(v):
        return None
    return RUN.report(v), RUN.run_record(v), json.loads((RUN.checkpoint(v) / "privacy_card.json").read_text())


def _wb(r: dict, name: str) -> str:
    got = [e for e in r["empirical"] if e["attack"] == name and e["delta_kind"] == "claimed"]
    return f"{got[0]['epsilon_lb']:.2f} (≤ {got[0]['ceiling']:.2f})" if got else "—"


def row(v: str) -> str:
    got = load(v)
    if got is None:
        return f"| {v} | not run yet | | | | | | | | |"
    r, run, card = got
    m, acct = r["metrics"], r["accounting"]
    lo, hi = wilson(m["accuracy"], m["n_test"])
    lmo = card.get("extra", {}).get("lmo")
    C = card["mechanism"]["clipping_norm"]
    if lmo:
        noise = "fixed Laplace" if lmo["fixed_scale"] else f"Laplace mixture ({lmo['draw'].replace('_', ' ')})"
        std = lmo["noise_std"] / C
    else:
        noise, std = "Gaussian", run["train_result"]["noise_multiplier"]
    claim = r["claim"]
    lower, upper = acct.get("lower_epsilon"), acct.get("certified_epsilon")
    black = max((e for e in r["empirical"] if e["delta_kind"] == "claimed" and not e["attack"].startswith("whitebox")),
                key=lambda e: e["epsilon_lb"])
    return (f"| {v} | {m['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] | {m.get('constant_predictor_accuracy', math.nan):.3f} "
            f"| {noise} | {std:.2f} | {claim['epsilon']:.3f} ({card['claim']['accountant']}) | "
            f"[{'—' if lower is None else f'{lower:.3f}'}, {'—' if upper is None else f'{upper:.3f}'}] | "
            f"{_wb(r, 'whitebox_gradient')} | "
            f"{_wb(r, 'whitebox_gradient_dense')} | {black['epsilon_lb']:.2f} ({black['attack']}) | "
            f"`{r['verdict']['status']}` |")


def main() -> None:
    print("| variant | test accuracy [95% CI] | constant predictor | noise | noise std / C | claimed ε (by) | "
          "true ε in (dpaudit's accounting) | white-box Dirac ε ≥ (ceiling) | white-box dense ε ≥ (ceiling) | best black-box ε ≥ | "
          "verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for v in VARIANTS:
        print(row(v))
    print()
    print("| LMO-DP run | minus control | difference in accuracy [95% CI] |")
    print("|---|---|---|")
    for lmo, controls in CONTROLS.items():
        base = load(lmo)
        if base is None:
            continue
        a, n = base[0]["metrics"]["accuracy"], base[0]["metrics"]["n_test"]
        for v in controls:
            other = load(v)
            if other is None:
                continue
            b, nb = other[0]["metrics"]["accuracy"], other[0]["metrics"]["n_test"]
            lo, hi = newcombe(a, n, b, nb)
            print(f"| {lmo} | {v} | {a - b:+.3f} [{lo:+.3f}, {hi:+.3f}] |")


if __name__ == "__main__":
    main()
