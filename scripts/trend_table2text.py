"""BLEU and ROUGE-L against ε for full and LoRA fine-tuning, from the per-variant report.json files of a run
directory, beside Li et al.'s Table 2 (GPT-2 on the real E2E, cited, not run here). Writes DIR/trend.png.
Run: `python scripts/trend_table2text.py [DIR]` (DIR defaults to its report folder)."""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "reports" / "li_repro_smollm2_table2text_n2000"
POSITIONS = {1.0: 0, 3.0: 1, 8.0: 2, None: 3}  # ε = 1, 3, 8, non-private, evenly spaced
# Li et al. (2022), Table 2 / Table 7: GPT-2 (124M) on E2E at ε = 3, 8 and non-private (no ε = 1 run).
PAPER = {"full": {"bleu": (61.519, 63.189, 69.463), "rougeL": (65.670, 66.429, 71.359)},
         "lora": {"bleu": (58.153, 63.389, 69.682), "rougeL": (65.773, 67.525, 71.709)}}
COLOURS = {"full": "tab:blue", "lora": "tab:orange"}


def points(run_dir: Path) -> tuple[dict, list]:
    """({trainable: [(position, bleu, rougeL), ...]} for the lines, sorted by position; [(trainable, variant, position,
    bleu, rougeL)] for the other runs at an occupied point). A claim off the 1/3/8/∞ grid is an error; where several
    runs share a (trainable, ε) point, the one named ``*-tuned`` (hyperparameters chosen on a validation split) is
    on the line and the others are drawn as open markers; several runs and none of them tuned is an error."""
    runs: dict = {}
    for p in sorted(run_dir.glob("*/report/report.json")):
        r = json.loads(p.read_text())
        eps = r["claim"]["epsilon"]
        key = None if eps is None else round(eps)
        if key not in POSITIONS:
            raise SystemExit(f"{p}: claimed ε {eps} is not one of 1, 3, 8, ∞; this plot places only those")
        trainable = r["reproducibility"]["config"]["train"]["trainable"]
        runs.setdefault((trainable, POSITIONS[key]), []).append(
            (p.parts[-3], r["metrics"]["bleu"], r["metrics"]["rougeL"]))
    if not runs:
        raise SystemExit(f"no */report/report.json under {run_dir}")
    lines: dict = {}
    others = []
    for (trainable, pos), rs in sorted(runs.items()):
        tuned = [r for r in rs if r[0].endswith("-tuned")]
        if len(rs) > 1 and len(tuned) != 1:
            raise SystemExit(f"{len(rs)} runs at {trainable}, position {pos} ({', '.join(r[0] for r in rs)}): name "
                             "exactly one of them '*-tuned' to put it on the line, or move the others out")
        main_run = tuned[0] if len(rs) > 1 else rs[0]
        lines.setdefault(trainable, []).append((pos, main_run[1], main_run[2]))
        others += [(trainable, r[0], pos, r[1], r[2]) for r in rs if r is not main_run]
    return lines, others


def main():
    ours, others = points(HERE)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True)
    for ax, metric, col in ((axes[0], "BLEU", 1), (axes[1], "ROUGE-L", 2)):
        for trainable, rows in ours.items():
            ax.plot([r[0] for r in rows], [r[col] for r in rows], "o-", color=COLOURS.get(trainable),
                    label=f"{trainable}, SmolLM2-135M, this run")
        for trainable, name, pos, bleu, rouge in others:
            ax.plot([pos], [bleu if col == 1 else rouge], "o", mfc="none", color=COLOURS.get(trainable),
                    label=f"{name} (not tuned), this run")
        for trainable, paper in PAPER.items():
            ax.plot([1, 2, 3], paper["bleu" if col == 1 else "rougeL"], "s--", color=COLOURS[trainable], alpha=0.45,
                    label=f"{trainable}, GPT-2 on E2E, Li et al. Table 2")
        ax.set_xticks(list(POSITIONS.values()), ["ε = 1", "ε = 3", "ε = 8", "non-private"])
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # below the plots: inside, it hides points
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, frameon=False)
    fig.suptitle("Table-to-text: utility against ε (each DP point audited; see README)")
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    out = HERE / "trend.png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
