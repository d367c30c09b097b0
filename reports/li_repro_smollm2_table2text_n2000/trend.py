"""BLEU and ROUGE-L against ε for full and LoRA fine-tuning, from the per-variant report.json files of a run
directory, beside Li et al.'s Table 2 (GPT-2 on the real E2E, cited, not run here). Writes DIR/trend.png.
Run: `python reports/li_repro_smollm2_table2text_n2000/trend.py [DIR]` (DIR defaults to here)."""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
POSITIONS = {1.0: 0, 3.0: 1, 8.0: 2, None: 3}  # ε = 1, 3, 8, non-private, evenly spaced
# Li et al. (2022), Table 2 / Table 7: GPT-2 (124M) on E2E at ε = 3, 8 and non-private (no ε = 1 run).
PAPER = {"full": {"bleu": (61.519, 63.189, 69.463), "rougeL": (65.670, 66.429, 71.359)},
         "lora": {"bleu": (58.153, 63.389, 69.682), "rougeL": (65.773, 67.525, 71.709)}}
COLOURS = {"full": "tab:blue", "lora": "tab:orange"}


def points(run_dir: Path) -> dict:
    """{trainable: [(position, bleu, rougeL), ...]} sorted by position; a claim off the 1/3/8/∞ grid is an error."""
    out: dict = {}
    for p in sorted(run_dir.glob("*/report/report.json")):
        r = json.loads(p.read_text())
        eps = r["claim"]["epsilon"]
        key = None if eps is None else round(eps)
        if key not in POSITIONS:
            raise SystemExit(f"{p}: claimed ε {eps} is not one of 1, 3, 8, ∞; this plot places only those")
        trainable = r["reproducibility"]["config"]["train"]["trainable"]
        out.setdefault(trainable, []).append((POSITIONS[key], r["metrics"]["bleu"], r["metrics"]["rougeL"]))
    if not out:
        raise SystemExit(f"no */report/report.json under {run_dir}")
    return {k: sorted(v) for k, v in out.items()}


def main():
    ours = points(HERE)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharex=True)
    for ax, metric, col in ((axes[0], "BLEU", 1), (axes[1], "ROUGE-L", 2)):
        for trainable, rows in ours.items():
            ax.plot([r[0] for r in rows], [r[col] for r in rows], "o-", color=COLOURS.get(trainable),
                    label=f"{trainable}, SmolLM2-135M, this run")
        for trainable, paper in PAPER.items():
            ax.plot([1, 2, 3], paper["bleu" if col == 1 else "rougeL"], "s--", color=COLOURS[trainable], alpha=0.45,
                    label=f"{trainable}, GPT-2 on E2E, Li et al. Table 2")
        ax.set_xticks(list(POSITIONS.values()), ["ε = 1", "ε = 3", "ε = 8", "non-private"])
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Table-to-text: utility against ε (each DP point audited; see README)")
    fig.tight_layout()
    out = HERE / "trend.png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
