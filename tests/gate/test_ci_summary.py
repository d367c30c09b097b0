"""What a CI job shows and fails on: `dpaudit compare` flags a row only by the test its row names, and `check` /
`compare --summary FILE` append markdown to the job's summary page (GitHub's $GITHUB_STEP_SUMMARY)."""

import copy
import json
import os
from pathlib import Path

import pytest

from dpaudit.cli import main
from dpaudit.gate.compare import TESTS, compare_one

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json"


def _rows(lines):
    return {ln.split(" | ")[0][2:]: ln for ln in lines if ln.startswith("| ") and not ln.startswith("| quantity")}


def test_every_row_names_its_test_and_sampled_noise_is_never_a_regression():
    old = json.loads(DEMO.read_text())
    new = copy.deepcopy(old)
    for a in new["attacks"].values():
        a["tpr_at_1_fpr"] += 0.05
    old["exposure"] = {"mean_inserted": 1.204}
    new["exposure"] = {"mean_inserted": 1.215}  # the case: +0.011 bits between two runs
    new["empirical_best"]["epsilon_lb"] += 0.2
    lines, n = compare_one(old, new, "t")
    rows = _rows(lines)
    assert n == 0, "\n".join(lines)
    for row in rows.values():  # | quantity | old | new | change | test | flag |
        assert [c.strip() for c in row.strip("|").split("|")][4] in TESTS, row
    assert "not tested" in rows["mean exposure, inserted (bits)"]
    assert "not tested" in rows["empirical ε lower bound"]


def test_deterministic_values_regress_exactly_accuracy_by_its_test():
    old = json.loads(DEMO.read_text())
    new = copy.deepcopy(old)
    new["verdict"]["empirical"]["ceiling"] -= 0.5  # a weaker audit design: deterministic, so any drop counts
    lines, n = compare_one(old, new, "t")
    assert n == 1 and "**regressed**" in _rows(lines)["audit ceiling (the most it could prove)"]
    # unpaired accuracy (no per-example outcomes): Newcombe's 95% interval for the difference must lie below 0
    for r in (old, new):
        r["metrics"].pop("correct")
    new["verdict"]["empirical"]["ceiling"] = old["verdict"]["empirical"]["ceiling"]
    new["metrics"]["accuracy"] = old["metrics"]["accuracy"] - 0.02  # 10 of 500 examples: within chance
    lines, n = compare_one(old, new, "t")
    row = _rows(lines)["accuracy"]
    assert n == 0 and "Newcombe 95%" in row and "not shown to be lower" in row
    new["metrics"]["accuracy"] = old["metrics"]["accuracy"] - 0.15
    lines, n = compare_one(old, new, "t")
    assert n == 1 and "**regressed**" in _rows(lines)["accuracy"]


def test_check_and_compare_append_to_the_job_summary(tmp_path, capsys):
    page = tmp_path / "summary.md"
    page.write_text("# earlier step\n")
    assert main(["check", str(DEMO), "--summary", str(page)]) == 0
    assert main(["compare", str(DEMO), str(DEMO), "--fail-on-regression", "--summary", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# earlier step\n")  # appended, as each step of a job appends to its page
    assert "### dpaudit check: passed" in text and "0 regression(s)" in text and "checked: " in text
    strict = tmp_path / "strict.toml"
    strict.write_text('[rules]\nallowed_verdicts = ["consistent"]\n')
    assert main(["check", str(DEMO), "--policy", str(strict), "--summary", str(page)]) == 1
    out = capsys.readouterr().out
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL ")]
    text = page.read_text()
    assert "### dpaudit check: failed" in text and text.count("- **FAIL** ") == len(fails) >= 1


def test_a_summary_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep\n")
    os.symlink(target, tmp_path / "summary.md")
    assert main(["check", str(DEMO), "--summary", str(tmp_path / "summary.md")]) == 2
    assert target.read_text() == "keep\n"
    assert "symlink" in capsys.readouterr().err


@pytest.mark.parametrize("where,fix", [("no/such/folder/summary.md", "its folder does not exist"),
                                       (".", "it is a folder"), ("link.md", "it is a symlink")],
                         ids=["missing folder", "a folder", "a link"])
@pytest.mark.parametrize("command", ["check", "compare"])
def test_a_summary_path_that_cannot_be_appended_to_names_the_fix_in_one_line(tmp_path, capsys, where, fix, command):
    os.symlink(tmp_path / "elsewhere.md", tmp_path / "link.md")
    argv = [command, str(DEMO)] + ([str(DEMO)] if command == "compare" else [])
    assert main(argv + ["--summary", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip()
    assert fix in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "elsewhere.md").exists()
