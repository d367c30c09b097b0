"""Rows of a table-to-text pilot README from its per-variant report.json files (a zero-shot BLEU column is
added when the runs measured the base model). Run: `python scripts/rows_table2text_pilot.py [DIR]`
(DIR defaults to reports/li_repro_table2text_data_pilot; reports/li_repro_smollm2_table2text_pilot uses it too)."""

import json
import sys
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reports" / "li_repro_table2text_data_pilot"
reports = sorted(HERE.glob("**/report/report.json"))
zero_shot = any("base_model" in json.loads(p.read_text())["metrics"] for p in reports)
print("| variant | MRs (records) | epochs | steps | σ | σC/B | example passes | validation BLEU | NIST | METEOR | ROUGE-L | CIDEr | "
      + ("zero-shot BLEU | " if zero_shot else "") + "final train loss | train s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if zero_shot else ""))
for p in reports:
    r = json.loads(p.read_text())
    m, tr = r["metrics"], r["reproducibility"]["train_result"]
    B = tr["sample_rate"] * tr["dataset_size"]
    C = r["reproducibility"]["config"]["train"]["clipping_norm"] if "config" in r["reproducibility"] else 0.1
    mrs = r["reproducibility"]["config"]["task"]["n_train"] if "config" in r["reproducibility"] else "?"
    zs = f"{m['base_model']['bleu']:.1f} | " if zero_shot else ""
    print(f"| {p.parts[-3]} | {mrs} ({tr['dataset_size']}) | {tr['steps'] * B / tr['dataset_size']:.1f} | {tr['steps']} | "
          f"{tr['noise_multiplier']:.3f} | {tr['noise_multiplier'] * C / B:.2g} | {tr['steps'] * B:.0f} | {m['bleu']:.1f} | "
          f"{m['nist']:.2f} | {m['meteor']:.1f} | {m['rougeL']:.1f} | {m['cider']:.2f} | {zs}{tr['final_loss']:.3f} | "
          f"{tr['seconds']:.0f} |")
