"""Rows of a table-to-text pilot README from its per-variant report.json files (a zero-shot BLEU column is
added when the runs measured the base model). Run: `python scripts/rows_table2text_pilot.py [DIR]`
(DIR defaults to reports/li_repro_table2text_data_pilot; reports/li_repro_smollm2_table2text_pilot uses it too)."""

from pathlib import Path

from dpaudit.run_folder import RunFolder, from_argv

RUN = from_argv(__doc__, Path(__file__).resolve().parents[1] / "reports" / "li_repro_table2text_data_pilot")
# a pilot folder is one run, or a folder of runs (one per data size)
runs = [RUN] if RUN.variants() else [RunFolder(p) for p in sorted(RUN.path.iterdir()) if p.is_dir()]
reports = [(v, run.report(v)) for run in runs for v in run.variants()]
zero_shot = any("base_model" in r["metrics"] for _, r in reports)
print("| variant | MRs (records) | epochs | steps | σ | σC/B | example passes | validation BLEU | NIST | METEOR | ROUGE-L | CIDEr | "
      + ("zero-shot BLEU | " if zero_shot else "") + "final train loss | train s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if zero_shot else ""))
for name, r in reports:
    m, tr = r["metrics"], r["reproducibility"]["train_result"]
    B = tr["sample_rate"] * tr["dataset_size"]
    C = r["reproducibility"]["config"]["train"]["clipping_norm"] if "config" in r["reproducibility"] else 0.1
    mrs = r["reproducibility"]["config"]["task"]["n_train"] if "config" in r["reproducibility"] else "?"
    zs = f"{m['base_model']['bleu']:.1f} | " if zero_shot else ""
    print(f"| {name} | {mrs} ({tr['dataset_size']}) | {tr['steps'] * B / tr['dataset_size']:.1f} | {tr['steps']} | "
          f"{tr['noise_multiplier']:.3f} | {tr['noise_multiplier'] * C / B:.2g} | {tr['steps'] * B:.0f} | {m['bleu']:.1f} | "
          f"{m['nist']:.2f} | {m['meteor']:.1f} | {m['rougeL']:.1f} | {m['cider']:.2f} | {zs}{tr['final_loss']:.3f} | "
          f"{tr['seconds']:.0f} |")
