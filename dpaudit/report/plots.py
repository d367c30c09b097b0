"""The PNG plots beside a REPORT.md: ROC curves of canary membership (log axes), score histograms of inserted
vs held-out canaries, exposure per canary, and how hard clipping bit per training step."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _score_panels(report: dict) -> list[tuple]:
    """(attack, "histogram" | "scores", data) for every attack whose scores the report can split into inserted and
    held-out canaries: its own signs, else (older reports) the exposure section's, else none (no panel)."""
    ex = report.get("exposure") or {}
    fallback = np.array([1 if c["inserted"] else -1 for c in ex.get("canaries", [])])
    out = []
    for name, a in (report.get("attacks") or {}).items():
        if "histogram" in a:
            out.append((name, "histogram", a["histogram"]))
            continue
        sc = np.asarray(a.get("scores", []), dtype=float)
        s = np.asarray(a["signs"]) if "signs" in a else fallback
        if sc.size and s.size == sc.size:
            out.append((name, "scores", (sc, s)))
    return out


def draw(report: dict, out: Path, prefix: str = "") -> list[str]:
    """Draw every plot the report has data for into ``out``; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    attacks = report.get("attacks", {})
    if attacks:
        fig, ax = plt.subplots(figsize=(4.5, 4))
        for name, a in attacks.items():
            fpr, tpr = np.array(a["roc"][0]), np.array(a["roc"][1])
            ax.plot(np.clip(fpr, 1e-3, 1), np.clip(tpr, 1e-3, 1), label=f"{name} (AUC {a['auc']:.2f})")
        ax.plot([1e-3, 1], [1e-3, 1], "k:", lw=0.8, label="chance")
        eps, delta = _claim(report)
        if eps is not None:  # (ε, δ)-DP allows no test above TPR = e^ε FPR + δ: the region the claim rules out
            grid = np.logspace(-3, 0, 200)
            edge = np.minimum(1.0, np.exp(eps) * grid + delta)
            ax.fill_between(grid, edge, 1.0, color="C3", alpha=0.12, lw=0,
                            label=f"ruled out by ε = {eps:.3g} (TPR > e^ε FPR + δ)")
            ax.plot(grid, edge, color="C3", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_title("ROC of canary membership (log axes)")
        ax.legend(fontsize=8)
        files.append(_save(fig, out, f"{prefix}roc.png"))

        drawable = _score_panels(report)  # only attacks whose scores can be told apart: no empty panel
        if drawable:
            cols = min(3, len(drawable))  # readable at page width: at most three panels a row
            rows = -(-len(drawable) // cols)
            fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
            for ax in axes.flat[len(drawable):]:
                ax.set_visible(False)
            for ax, (name, kind, data) in zip(axes.flat, drawable):
                if kind == "histogram":  # many canaries: the report keeps counts per bin, not every score
                    for key, label in (("inserted", "inserted"), ("held_out", "held out")):
                        ax.stairs(data[key], data["edges"], fill=True, alpha=0.6, label=label)
                else:
                    sc, s = data
                    bins = np.histogram_bin_edges(sc, bins=20)
                    ax.hist(sc[s > 0], bins=bins, alpha=0.6, label="inserted")
                    ax.hist(sc[s < 0], bins=bins, alpha=0.6, label="held out")
                ax.set_title(f"{name} score")
                ax.set_xlabel("score (higher = member)")
                ax.set_ylabel("canaries")
                ax.legend(fontsize=8)
            files.append(_save(fig, out, f"{prefix}scores.png"))
    ex = report.get("exposure")
    if ex:
        can = ex["canaries"]
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for ins, col, lab in ((True, "C3", "inserted"), (False, "C0", "held out")):
            idx = [i for i, c in enumerate(can) if c["inserted"] == ins]
            ax.scatter(idx, [can[i]["exposure"] for i in idx], s=12, c=col, label=lab)
        ax.axhline(ex["max_rank_exposure"], color="k", ls="--", lw=0.8, label="max (rank 1)")
        ax.axhline(1.0, color="gray", ls=":", lw=0.8, label="chance (~1)")
        ax.set_xlabel("canary")
        ax.set_ylabel("exposure (bits)")
        ax.set_title("Exposure per canary")
        ax.legend(fontsize=7, loc="center right")
        files.append(_save(fig, out, f"{prefix}exposure.png"))
    clip = clipping_summary(report)
    per = clip.get("per_step") or {}
    if clip.get("steps_observed") and isinstance(per, dict):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(8.4, 3.2))
        a1.plot(*_series(per.get("fraction_clipped")), lw=1)  # each series on the steps that recorded it
        a1.set_ylim(-0.03, 1.03)
        a1.set_xlabel("step")
        a1.set_ylabel("fraction of units clipped")
        a2.plot(*_series(per.get("median_norm")), lw=1, label="median per-unit norm")
        c = clip.get("clipping_norm")
        if isinstance(c, (int, float)) and not isinstance(c, bool) and np.isfinite(c) and c > 0:
            a2.axhline(c, color="k", ls=":", lw=0.8, label=f"C = {c:g}")
        a2.set_yscale("log")
        a2.set_xlabel("step")
        a2.set_ylabel("gradient norm")
        a2.legend(fontsize=7)
        from matplotlib.ticker import MaxNLocator

        for a in (a1, a2):
            a.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        fig.suptitle("How hard clipping bites, per step", fontsize=10)
        files.append(_save(fig, out, f"{prefix}clipping.png"))
    return files


def _series(values) -> tuple[list, list]:
    """(steps, values) of a per-step list, on the steps whose value is a finite number (a step without a reading
    is null)."""
    pts = [(i + 1, float(v)) for i, v in enumerate(values if isinstance(values, list) else [])
           if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _claim(report: dict) -> tuple[float | None, float]:
    """(ε, δ) of the report's claim, (None, 0) for a model without one."""
    c = report.get("claim") or {}
    eps, delta = c.get("epsilon"), c.get("delta")
    if not c.get("private") or not isinstance(eps, (int, float)) or not np.isfinite(eps):
        return None, 0.0
    return float(eps), float(delta) if isinstance(delta, (int, float)) else 0.0


def clipping_summary(report: dict) -> dict:
    """The run's clipping summary (``train_result.clipping`` in run.json), {} when there is none."""
    return ((report.get("reproducibility") or {}).get("train_result") or {}).get("clipping") or {}


def _save(fig, out: Path, name: str) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
