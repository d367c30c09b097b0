"""Learning-rate choice for the non-private full row, by the rule configs/li_repro_smollm2_table2text_n2000_full_lr.toml
fixed before any rate was run: the highest validation BLEU wins; rates not run are not candidates. Reads the
per-variant report.json (metrics) and checkpoint/run.json (the learning rate the trainer used) under DIR and refuses a
report whose metrics come from the test split, so a test number can never pick a hyperparameter.
Run: `python scripts/choose_lr.py [DIR]` (DIR defaults to its report folder)."""

import json
import sys
import tomllib
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reports" / "li_repro_smollm2_table2text_n2000_lr"
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "li_repro_smollm2_table2text_n2000_full_lr.toml"


def runs(run_dir: Path, configured: list[str]) -> list[tuple[str, float, dict]]:
    """[(variant, lr, metrics)] of every run under run_dir: the config's variants, validation split only."""
    out = []
    for p in sorted(run_dir.glob("*/report/report.json")):
        if p.parts[-3] not in configured:
            raise SystemExit(f"{p}: {p.parts[-3]!r} is not a variant of {CONFIG.name} ({', '.join(configured)}); "
                             "move it out of the directory")
        m = json.loads(p.read_text())["metrics"]
        if m.get("split") != "validation":
            raise SystemExit(f"{p}: metrics are on the {m.get('split')!r} split; only validation runs may choose the "
                             "learning rate (set task.validation)")
        lr = json.loads((p.parents[1] / "checkpoint" / "run.json").read_text())["trainer"]["lr"]
        out.append((p.parts[-3], lr, m))
    if not out:
        raise SystemExit(f"no */report/report.json under {run_dir}")
    return out


def main():
    configured = [v["name"] for v in tomllib.loads(CONFIG.read_text())["variants"]]
    done = runs(HERE, configured)
    print("| variant | lr | validation BLEU | ROUGE-L | METEOR | CIDEr | validation MRs |")
    print("|---|---|---|---|---|---|---|")
    for name, lr, m in sorted(done, key=lambda r: -r[1]):
        print(f"| {name} | {lr:g} | {m['bleu']:.1f} | {m['rougeL']:.1f} | {m.get('meteor', float('nan')):.1f} | "
              f"{m['cider']:.2f} | {m['n_test']} |")
    name, lr, m = max(done, key=lambda r: r[2]["bleu"])
    missing = [v for v in configured if v not in {r[0] for r in done}]
    print(f"\nchosen: lr {lr:g} ({name}, validation BLEU {m['bleu']:.1f}) among {len(done)} of {len(configured)} "
          f"configured rates" + (f"; not run: {', '.join(missing)}" if missing else ""))


if __name__ == "__main__":
    main()
