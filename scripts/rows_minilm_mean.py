"""The table of README.md, printed from the committed per-variant report.json files: test accuracy with a 95%
Wilson interval, claimed ε, PLD / RDP re-accounting, σ, steps, train loss, LOSS AUC, the one-run bound.
Run: `python scripts/rows_minilm_mean.py [DIR] > reports/li_repro_minilm_mean/rows.txt` (DIR defaults to
reports/li_repro_minilm_mean)"""

import json
import math
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reports" / "li_repro_minilm_mean"
VARIANTS = ["full-nonprivate", "full-eps8", "full-eps3", "full-eps1",
            "lora-nonprivate", "lora-eps8", "lora-eps3", "lora-eps1"]


def wilson(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main():
    print("| variant | test accuracy [95% CI] | claimed ε (PRV) | PLD / RDP | σ | steps | final train loss | "
          "LOSS AUC [95% CI] | empirical ε lower bound, 95% (best test, ceiling) | verdict |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for v in VARIANTS:
        r = json.loads((HERE / v / "report" / "report.json").read_text())
        m, tr = r["metrics"], r["reproducibility"]["train_result"]
        lo, hi = wilson(m["accuracy"], m["n_test"])
        eps = {a["accountant"]: a["epsilon"] for a in r["accounting"]["results"]}
        claimed = f"{eps['prv']:.2f}" if eps else "∞"
        reacc = f"{eps['pld']:.2f} / {eps['rdp']:.2f}" if eps else "—"
        sigma = f"{tr['noise_multiplier']:.3f}" if tr["noise_multiplier"] is not None else "—"
        la = r["attacks"]["loss"]
        auc = f"{la['auc']:.3f} [{la['auc_ci'][0]:.2f}, {la['auc_ci'][1]:.2f}]"
        b = r["empirical_best"]
        bound = f"{b['epsilon_lb']:.2f} ({b['attack']}, {b['ceiling']:.2f})"
        print(f"| {v} | {m['accuracy']:.3f} [{lo:.3f}, {hi:.3f}] | {claimed} | {reacc} | {sigma} | {tr['steps']} | "
              f"{tr['final_loss']:.3f} | {auc} | {bound} | `{r['verdict']['status']}` |")


def majority():
    from dpaudit.tasks import sentiment

    cfg = json.loads((HERE / "full-eps8" / "report" / "report.json").read_text())["metrics"]
    test = sentiment.load("rotten-tomatoes", n_test=cfg["n_test"]).test
    pos = sum(e["label"] for e in test) / len(test)
    print(f"\nTest split: {len(test)} snippets, majority class {max(pos, 1 - pos):.3f}")


if __name__ == "__main__":
    main()
    majority()
