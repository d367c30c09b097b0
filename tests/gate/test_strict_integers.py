"""A count is an integer in every file dpaudit reads: JSON Schema's "integer" also accepts a float with no fraction
(64.0), which the readers then carried as a count of another type than the writer's. Every schema is read through
``dpaudit.checks.schema_validator``, which refuses it."""

import json
from pathlib import Path

import jsonschema
import pytest

from dpaudit import report_file
from dpaudit.checks import schema_validator
from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.run_folder import read_run_record

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "reports" / "demo" / "dp-eps8"


def test_the_validator_refuses_a_whole_float_where_the_standard_accepts_it():
    schema = {"type": "object", "properties": {"m": {"type": "integer"}, "x": {"type": "number"}}}
    doc = {"m": 64.0, "x": 64}
    assert jsonschema.Draft202012Validator(schema).is_valid(doc)  # the standard's reading, the reason for this one
    assert not schema_validator(schema).is_valid(doc)
    assert schema_validator(schema).is_valid({"m": 64, "x": 64.0})  # a number may still be written either way
    assert not schema_validator(schema).is_valid({"m": True})


def test_every_committed_report_and_run_record_reads_with_strict_integers():
    reports = sorted((ROOT / "reports").rglob("report.json"))
    runs = sorted((ROOT / "reports").rglob("run.json"))
    for f in reports:
        report_file.load(f)
    for f in runs:
        read_run_record(f)
    assert len(reports) >= 200 and len(runs) >= 200


@pytest.mark.parametrize("command", ["check", "compare", "model-card"])
def test_a_count_written_as_a_float_is_one_line_exit_2(command, tmp_path, capsys):
    r = json.loads((DEMO / "report" / "report.json").read_text())
    r["empirical"][0]["m"] = float(r["empirical"][0]["m"])
    bad = tmp_path / "report.json"
    bad.write_text(json.dumps(r))
    argv = {"check": ["check", str(bad)], "compare": ["compare", str(DEMO / "report" / "report.json"), str(bad)],
            "model-card": ["model-card", str(bad), "--to", str(tmp_path / "README.md")]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "empirical/0/m" in err and "not of type 'integer'" in err, err
    assert not (tmp_path / "README.md").exists()


def test_a_run_record_with_a_float_context_is_refused(tmp_path):
    run = json.loads((DEMO / "checkpoint" / "run.json").read_text())
    run["model"]["max_len"] = float(run["model"]["max_len"])
    (tmp_path / "run.json").write_text(json.dumps(run))
    with pytest.raises(DpauditError, match=r"model/max_len: .* is not of type 'integer'"):
        read_run_record(tmp_path / "run.json")
