"""Every example a newcomer copies runs, on its smallest settings (prv_accountant runs its README as a test).

examples/audit_external_opacus.py end to end (canaries, Opacus training, card, audit by the plan fixed before
training), then the CLI line of its docstring on the folder it wrote; the GitHub Actions workflow names files
and commands that exist.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "audit_external_opacus.py"
SMALL = ["--canaries", "20", "--records", "60", "--epochs", "1", "--references", "50", "--secret-length", "3"]


def _example():
    spec = importlib.util.spec_from_file_location("audit_external_opacus", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_opacus_example_runs_and_its_cli_line_audits_the_same_folder(tmp_path, capsys):
    assert _example().main(["--out", str(tmp_path / "ext"), "--insecure-rng", *SMALL]) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "ext" / "report" / "report.json").read_text())
    assert report["audit_plan"]["status"] == "as planned" and report["audit_plan"]["used"]["n_references"] == 50
    assert report["verdict"]["accounting"]["status"] == "verified"
    assert f"{report['verdict']['status']}: " in printed
    # the docstring's second line, as written, on the folder the example wrote
    line = next(ln.strip() for ln in EXAMPLE.read_text().splitlines() if ln.strip().startswith("dpaudit evaluate"))
    argv = [a.replace("out/external", str(tmp_path / "ext")) for a in shlex.split(line.split("#")[0])[1:]]
    assert main([*argv, "--quiet"]) == 0
    cli = json.loads((tmp_path / "ext" / "report" / "report.json").read_text())
    assert cli["claim"] == report["claim"] and cli["accounting"] == report["accounting"]
    assert cli["attacks"]["loss"]["auc"] == report["attacks"]["loss"]["auc"]  # the objects and the saved folder agree
    assert cli["canary_plan"]["framing"] == "tokenizer"  # a plain HF folder: scored as the loop fed the records


def test_github_actions_workflow_names_what_exists():
    text = (ROOT / "examples" / "github-actions.yml").read_text()
    for path in re.findall(r"(configs/[\w.]+\.toml)", text):
        assert (ROOT / path).is_file(), path
    commands = [ln.strip().removeprefix("run: ") for ln in text.splitlines() if "dpaudit " in ln and "run" in ln]
    assert any(c.startswith("dpaudit run configs/tiny.toml") for c in commands)
    make = (ROOT / "Makefile").read_text()  # make ci-audit (in .ci/run) runs the same two commands
    assert "dpaudit run configs/tiny.toml" in make and "--policy configs/policy.toml" in make
