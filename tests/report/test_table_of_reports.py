"""`dpaudit table` over evaluation report folders (`dpaudit evaluate --out`, or their report.json), for checkpoints
trained anywhere: one row each, with the numbers the run's own table gives for the same reports (it was refused:
"pass the --out of a `dpaudit run`")."""

from __future__ import annotations

from pathlib import Path

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "reports" / "demo"
COLUMNS = "variant,claimed,best,verdict,loss_auc,design,sigma,steps"


def test_report_folders_give_the_rows_of_their_run(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the reports name their checkpoints relative to the checkout
    assert main(["table", str(DEMO), "--columns", COLUMNS]) == 0
    run_rows = capsys.readouterr().out
    assert main(["table", str(DEMO / "dp-eps8" / "report"), str(DEMO / "non-private" / "report" / "report.json"),
                 "--columns", COLUMNS]) == 0
    assert capsys.readouterr().out == run_rows


def test_a_report_folder_made_elsewhere_keeps_the_columns_its_report_holds(tmp_path, capsys, monkeypatch):
    """A report copied away from its checkpoint: the report's own columns are there; a column that needs the
    checkpoint's run.json is one line naming the column's absence."""
    monkeypatch.chdir(tmp_path)  # where the checkpoint the report names (relative to the checkout) is not
    d = tmp_path / "audit of my model"
    d.mkdir()
    (d / "report.json").write_bytes((DEMO / "dp-eps8" / "report" / "report.json").read_bytes())
    assert main(["table", str(d), "--columns", "variant,claimed,verdict"]) == 0
    assert "| dp-eps8 | 7.99 | `underpowered` |" in capsys.readouterr().out
    assert main(["table", str(d), "--columns", "variant,trained"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "has no value for a requested column" in err
