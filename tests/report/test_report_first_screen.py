"""What a newcomer reads first (issue [5/5] item 4): the comparison table shows the accounting interval that
decides, never a loose upper bound as "the" re-accounted epsilon; an underpowered verdict names whose ceiling it
quotes when the best bound belongs to another test."""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit.claim.verdict import empirical
from dpaudit.report.write import _reaccounted

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_shows_the_interval_that_decides_not_the_loosest_accountant():
    r = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    a = r["accounting"]
    assert a["reaccounted_epsilon"] > r["claim"]["epsilon"]  # RDP's loose upper value, above the claim
    cell = _reaccounted(r)
    assert cell == f"verified: ε ≤ {a['certified_epsilon']:.4g}" and f"{a['reaccounted_epsilon']:.3g}" not in cell
    under = {**r, "accounting": {**a, "status": "under-claim", "lower_epsilon": 9.1, "certified_epsilon": None}}
    assert _reaccounted(under) == "under-claim: true ε ≥ 9.1"
    assert _reaccounted({**r, "claim": {**r["claim"], "private": False}}) == "—"


def test_an_underpowered_verdict_quotes_one_reach_and_the_best_bound():
    """One reach number in the reason (the audit's: the most any of its tests could prove), never a second
    ceiling-like number beside it (the best test's own ceiling is in the bounds table)."""
    from dpaudit.audit.rows import TestRow

    best = {"epsilon_lb": 0.65, "family_confidence": 0.95, "attack": "whitebox_gradient", "ceiling": 2.75,
            "delta_kind": "claimed"}
    v = empirical(7.99, TestRow.from_dict(best), ceiling=3.17)
    assert v.status == "underpowered"
    assert "could reach epsilon 3.17 at most" in v.reason and "2.75" not in v.reason
    assert "found 0.65 at 95% (whitebox_gradient)" in v.reason
    at = empirical(3.0, TestRow.from_dict({**best, "ceiling": 3.17}), ceiling=3.17)
    assert at.status == "consistent" and "could reach epsilon 3.17, at or above the claim 3" in at.reason


def test_a_report_made_through_the_api_has_a_title():
    from dpaudit.report.markdown import render_markdown

    r = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    r["checkpoint"] = {"path": None, "hash": "0123456789abcdef"}
    first = render_markdown(r, []).splitlines()[0]
    assert first == "# dpaudit report: a model held as objects (hash 0123456789abcdef)"


def test_a_checkpoint_one_folder_off_gets_the_right_fix(tmp_path):
    import pytest

    from dpaudit import checkpoint
    from dpaudit.errors import DpauditError

    ck = ROOT / "reports" / "demo" / "dp-eps8" / "checkpoint"
    for off in (ck.parent, ck / "model"):
        with pytest.raises(DpauditError, match=f"one folder off: pass {ck}"):
            checkpoint.load(off)
    trainer = tmp_path / "output_dir"  # a Trainer's output_dir/ holding the card, its checkpoint-N/ the weights
    (trainer / "checkpoint-5").mkdir(parents=True)
    for f in ("privacy_card.json", "canaries.json"):
        (trainer / f).write_bytes((ck / f).read_bytes())
    (trainer / "checkpoint-5" / "config.json").write_text("{}")
    with pytest.raises(DpauditError, match="the card is one folder up, in .*output_dir: copy privacy_card.json"):
        checkpoint.load(trainer / "checkpoint-5")
    with pytest.raises(DpauditError, match="is a file; pass the folder that holds it"):
        checkpoint.load(trainer / "checkpoint-5" / "config.json")


def test_compare_flags_an_auc_only_when_its_interval_clears_the_old_one():
    """An AUC 0.03 higher inside +-0.08 intervals is noise, not a regression; one whose interval lies wholly above
    the old one is."""
    import copy

    from dpaudit.gate.compare import compare_one

    old = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    old["attacks"]["loss"].update(auc=0.50, auc_ci=[0.42, 0.58])
    new = copy.deepcopy(old)
    new["attacks"]["loss"].update(auc=0.53, auc_ci=[0.45, 0.61])
    lines, _ = compare_one(old, new, "t")
    (row,) = [ln for ln in lines if ln.startswith("| AUC loss |")]
    assert "within the 95% intervals" in row and "regressed" not in row
    new["attacks"]["loss"].update(auc=0.75, auc_ci=[0.68, 0.82])
    lines, _ = compare_one(old, new, "t")
    (row,) = [ln for ln in lines if ln.startswith("| AUC loss |")]
    assert "**regressed**" in row


def test_first_screen_answers_is_it_kept_how_strong_and_what_next(capsys):
    """The three questions of a newcomer, answered by the summary under the verdict: the accounting interval (never
    the loose upper value as the true ε), the strength of the test at the claim (what a mechanism exactly at it
    shows with these canaries), and the next step: an `audit plan` command filled in from the card, which runs."""
    import shlex

    from dpaudit.cli import main
    from dpaudit.report.markdown import summary_lines

    r = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    lines = summary_lines(r)
    acc = next(ln for ln in lines if ln.startswith("- Accounting"))
    assert "[7.974, 7.975]" in acc and "9.56, is a bound, not the true ε" in acc
    strength = next(ln for ln in lines if ln.startswith("- Strength of the test at the claim"))
    limit = max(x["epsilon_lb"] for x in r["audit_limits"])
    assert f"shows {limit:.2f} in the median audit" in strength and f"{limit / r['claim']['epsilon']:.0%}" in strength
    nxt = next(ln for ln in lines if ln.startswith("- Next: "))
    cmd = nxt.split("`")[1]
    e = r["mechanism"]["events"][0]
    assert f"--sigma {e['noise_multiplier']:.4g}" in cmd and f"--steps {e['steps']}" in cmd
    assert main([*shlex.split(cmd)[1:], "--canaries", "1000"]) == 0
    assert "m =     1,000" in capsys.readouterr().out
    # an audit able to reach the claim has no next-step lines; a non-private model no strength line
    assert not any(ln.startswith("- Next") for ln in summary_lines(
        {**r, "verdict": {**r["verdict"], "empirical": {**r["verdict"]["empirical"], "status": "consistent"}}}))
    assert not any(ln.startswith("- Strength") for ln in summary_lines({**r, "claim": {**r["claim"], "private": False}}))


def _png_size(path: Path) -> tuple[int, int]:
    import struct

    return struct.unpack(">II", path.read_bytes()[16:24])


def test_score_plots_have_no_empty_panel_and_fit_the_page(tmp_path):
    """scores.png draws a panel only for an attack whose scores it can split (the demo's report predates black-box
    signs and has no exposure section: one panel, not two blank ones), at most three panels a row (the language
    model's seven: 3 x 3, not a 2772-pixel strip); a new report's black-box rows carry their signs."""
    from dpaudit.audit.families import attack_rows
    from dpaudit.report import plots

    demo = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    assert [p[0] for p in plots._score_panels(demo)] == ["loss", "reference", "whitebox_gradient"]
    for name in ("loss", "reference"):  # as a report written before black-box rows carried their signs
        demo["attacks"][name].pop("signs")
    assert not demo.get("exposure") and [p[0] for p in plots._score_panels(demo)] == ["whitebox_gradient"]
    lm = json.loads((ROOT / "reports" / "demo_lm" / "dp-eps8" / "report" / "report.json").read_text())
    assert len(plots._score_panels(lm)) == 7
    for name, r in (("demo", demo), ("lm", lm)):
        out = tmp_path / name
        out.mkdir()
        assert "scores.png" in plots.draw(r, out)
        w, h = _png_size(out / "scores.png")
        assert w <= 3 * 4.2 * 110 + 1, (name, w)
    assert _png_size(tmp_path / "demo" / "scores.png")[0] < 500  # one panel
    import numpy as np

    signs = np.array([1, -1] * 10)
    rows = attack_rows({"loss": np.linspace(0, 1, 20)}, signs, None)
    assert rows["loss"]["signs"] == signs.tolist()
    demo["attacks"]["loss"]["signs"] = [1 if c else -1 for c in range(len(demo["attacks"]["loss"]["scores"]))]
    assert [p[0] for p in plots._score_panels(demo)] == ["loss", "whitebox_gradient"]


def test_the_clipping_plot_draws_each_series_on_the_steps_that_recorded_it(tmp_path):
    """A step with a clipped fraction but no median norm (null) drew series of unequal lengths: a crash (exit 3)
    on a run record the schema allows (a hostile round, 2026-11-29)."""
    from dpaudit.report import plots

    r = json.loads((ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json").read_text())
    per = r["reproducibility"]["train_result"]["clipping"]["per_step"]
    per["fraction_clipped"][1] = None
    per["median_norm"][3] = None
    assert plots._series(per["fraction_clipped"])[0][:3] == [1, 3, 4]
    assert plots._series([None, 2.0, float("nan"), True])[0] == [2]  # only finite numbers are points
    assert "clipping.png" in plots.draw(r, tmp_path)
