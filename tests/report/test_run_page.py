"""The run's page (REPORT.md of `dpaudit run`) and what a newcomer sees while it runs: no column empty for every
variant, both canary counts, each verdict with its reach; progress bars that name the variant; plots that say
which way a score points and which ROC region the claim rules out."""

import copy
import json
from pathlib import Path

from dpaudit import progress
from dpaudit.report import write

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "reports" / "demo"


def _reports() -> dict:
    return {v: json.loads((DEMO / v / "report" / "report.json").read_text()) for v in ("non-private", "dp-eps8")}


def test_a_column_no_variant_fills_is_left_out_and_one_that_one_fills_is_kept():
    reports = _reports()
    head = write._table(reports)[0]
    assert "exposure AUC" not in head and "mean exposure" not in head  # the demo's task has no exposure
    assert "white-box canary AUC" in head and "LOSS AUC" in head
    rows = write._table(reports)[2:]
    assert all(ln.count("|") == head.count("|") for ln in rows)
    filled = copy.deepcopy(reports)
    filled["dp-eps8"]["exposure"] = {"mean_inserted": 1.2, "mean_held_out": 1.0}
    assert "mean exposure" in write._table(filled)[0]


def test_the_page_names_both_canary_counts_and_each_reach(tmp_path):
    out = write.write_comparison(_reports(), tmp_path / "run", "dpaudit run configs/demo.toml", {})
    text = (out / "REPORT.md").read_text()
    assert "Text canaries: m = 200" in text and "White-box gradient canaries (the probe's, in the training loop): " \
                                                 "m = 1,000" in text
    assert "**dp-eps8**: `underpowered` (the audit reaches ε 3.17 at most)" in text


def test_every_bar_inside_a_label_names_it(monkeypatch):
    import io

    monkeypatch.setattr(progress, "_quiet", False)
    screen = io.StringIO()
    with progress.label("dp-eps8"):
        list(progress.bar(range(3), desc="DP train", file=screen, leave=True))
    list(progress.bar(range(3), desc="train", file=screen, leave=True))
    lines = screen.getvalue().replace("\r", "\n").split("\n")
    assert any(ln.startswith("dp-eps8: DP train:") for ln in lines)
    assert any(ln.startswith("train:") for ln in lines)


def test_the_roc_shows_what_the_claim_rules_out_and_scores_their_direction(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpaudit.report import plots

    r = _reports()["dp-eps8"]
    r["claim"]["epsilon"] = 1.0
    seen = {}
    real = plots._save

    def keep(fig, out, name):
        seen[name] = [(ax.get_xlabel(), [t.get_text() for t in (ax.get_legend().get_texts() if ax.get_legend() else [])])
                      for ax in fig.axes if ax.get_visible()]
        return real(fig, out, name)

    plots._save = keep
    try:
        plots.draw(r, tmp_path)
    finally:
        plots._save = real
        plt.close("all")
    assert any("ruled out by ε = 1" in t for _, texts in seen["roc.png"] for t in texts)
    assert all(x == "score (higher = member)" for x, _ in seen["scores.png"])
