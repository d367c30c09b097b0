"""Rows of README.md from the per-variant report.json files of this run (task metrics, zero-shot BLEU, accounting,
training and the audit). Run: `python scripts/rows_table2text.py [DIR]` (DIR defaults to its report folder)."""

import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reports" / "li_repro_smollm2_table2text"


def final_loss(tr: dict) -> str:
    """The final training loss with the window it averages: runs since session 10 record one loss per logical step
    (``final_loss_steps`` of them averaged); older runs averaged the last 20 physical batches of a DP run but the
    last 20 logical steps of a non-private one, so the window is printed and rows are compared within a definition."""
    k = tr.get("final_loss_steps")
    if k:
        return f"{tr['final_loss']:.3f} (last {k} of {tr['steps']} steps)"
    return f"{tr['final_loss']:.3f} (last 20 {'batches' if tr.get('noise_multiplier') else 'steps'}, old)"


print("| variant | BLEU | NIST | METEOR | ROUGE-L | CIDEr | zero-shot BLEU | claimed ε (PRV) | PLD / RDP | σ | σC/B | "
      "final train loss | LOSS AUC [95% CI] | empirical ε lower bound (best test, confidence, ceiling) | verdict |")
print("|" + "---|" * 15)
for p in sorted(HERE.glob("*/report/report.json")):
    r = json.loads(p.read_text())
    m, tr, acc = r["metrics"], r["reproducibility"]["train_result"], r["accounting"]
    by = {a["accountant"]: a["epsilon"] for a in acc["results"]}
    eps = r["claim"]["epsilon"]
    sigma = tr.get("noise_multiplier") or 0.0
    B = tr["sample_rate"] * tr["dataset_size"]
    C = r["reproducibility"]["config"]["train"]["clipping_norm"]
    loss, best = r["attacks"]["loss"], r["empirical_best"]
    print(f"| {p.parts[-3]} | {m['bleu']:.1f} | {m['nist']:.2f} | {m['meteor']:.1f} | {m['rougeL']:.1f} | "
          f"{m['cider']:.2f} | {m['base_model']['bleu'] if 'base_model' in m else float('nan'):.1f} | {'∞' if eps is None else f'{eps:.2f}'} | "
          + (f"{by['pld']:.2f} / {by['rdp']:.2f}" if by else "—") + " | "
          + (f"{sigma:.3f} | {sigma * C / B:.2g}" if sigma else "— | —") + f" | {final_loss(tr)} | "
          f"{loss['auc']:.3f} [{loss['auc_ci'][0]:.2f}, {loss['auc_ci'][1]:.2f}] | {best['epsilon_lb']:.2f} "
          f"({best['attack']}, {best['family_confidence']:.0%}, {best['ceiling']:.2f}) | `{r['verdict']['status']}` |")
