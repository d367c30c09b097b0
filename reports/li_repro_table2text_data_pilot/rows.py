"""Rows of README.md from the per-variant report.json files of this pilot.
Run: `python reports/li_repro_table2text_data_pilot/rows.py`"""

import json
from pathlib import Path

HERE = Path(__file__).parent
print("| variant | MRs (records) | epochs | steps | σ | σC/B | example passes | validation BLEU | NIST | METEOR | ROUGE-L | CIDEr | final train loss | train s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in sorted(HERE.glob("*/*/report/report.json")):
    r = json.loads(p.read_text())
    m, tr = r["metrics"], r["reproducibility"]["train_result"]
    B = tr["sample_rate"] * tr["dataset_size"]
    mrs = r["reproducibility"]["config"]["task"]["n_train"] if "config" in r["reproducibility"] else "?"
    print(f"| {p.parts[-3]} | {mrs} ({tr['dataset_size']}) | {tr['steps'] * B / tr['dataset_size']:.1f} | {tr['steps']} | "
          f"{tr['noise_multiplier']:.3f} | {tr['noise_multiplier'] * 0.1 / B:.2g} | {tr['steps'] * B:.0f} | {m['bleu']:.1f} | "
          f"{m['nist']:.2f} | {m['meteor']:.1f} | {m['rougeL']:.1f} | {m['cider']:.2f} | {tr['final_loss']:.3f} | {tr['seconds']:.0f} |")
