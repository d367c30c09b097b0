"""Every example a newcomer copies runs, on its smallest settings (prv_accountant runs its README as a test).

examples/audit_external_opacus.py end to end (canaries, Opacus training, card, audit by the plan fixed before
training), then the CLI line of its docstring on the folder it wrote; examples/dp_sgd_torch_func.py (a hand-written
DP-SGD loop with the functional probe), honest and with a bug; the GitHub Actions workflow names files and
commands that exist.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
from pathlib import Path

import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "audit_external_opacus.py"
SMALL = ["--canaries", "20", "--records", "60", "--epochs", "1", "--references", "50", "--secret-length", "3",
         "--batch-size", "32", "--probe-canaries", "200"]
BUGGY = ["--canaries", "20", "--records", "120", "--epochs", "2", "--references", "50", "--secret-length", "3",
         "--batch-size", "32", "--probe-canaries", "100", "--width", "32"]


def _example(path: Path = EXAMPLE):
    spec = importlib.util.spec_from_file_location(path.stem, path)
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
    assert cli["mechanism_checks"] == report["mechanism_checks"] and report["mechanism_checks"][0]["mode"] == "hooks"
    assert {c["check"]: c["status"] for c in report["mechanism_checks"][0]["checks"]}["steps"] == "pass"
    assert "whitebox_gradient" in report["attacks"]  # the probe's canaries, audited


@pytest.mark.parametrize("bug,check", [("accumulation", "sampling")])
def test_a_planted_bug_makes_the_gate_fail_with_a_line_naming_it(tmp_path, capsys, bug, check):
    """The README's promise, through the CLI: the example's loop with one bug, `dpaudit evaluate` on its folder,
    then `dpaudit check` exits 1 with a FAIL line naming the check (tests/probe/test_probe.py plants the others in a
    plain Opacus loop; experiments/probe_bugs.py measures every rate on this example)."""
    out = tmp_path / bug
    ex = _example()
    ex.train(ex.parser().parse_args(["--out", str(out), "--insecure-rng", "--epsilon", "8", "--bug", bug, *BUGGY]))
    capsys.readouterr()
    assert main(["evaluate", str(out / "model"), "--out", str(out / "cli"), "--quiet"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("mechanism-mismatch: "), printed  # the failed check decides the headline
    assert main(["check", str(out / "cli" / "report.json")]) == 1
    fails = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FAIL")]
    assert any(f"mechanism check '{check}'" in ln for ln in fails), fails


TORCH_FUNC = ROOT / "examples" / "dp_sgd_torch_func.py"
FUNC_SMALL = ["--canaries", "20", "--records", "100", "--epochs", "2", "--references", "50", "--secret-length", "3",
              "--batch-size", "32", "--probe-canaries", "200", "--width", "32"]


def test_torch_func_example_runs_with_the_functional_probe_and_its_cli_lines_gate_it(tmp_path, capsys):
    assert _example(TORCH_FUNC).main(["--out", str(tmp_path / "tf"), *FUNC_SMALL]) == 0
    report = json.loads((tmp_path / "tf" / "report" / "report.json").read_text())
    (entry,) = report["mechanism_checks"]
    assert entry["mode"] == "functional" and entry["coordinates"] == "model", entry
    assert {c["check"]: c["status"] for c in entry["checks"]} == {
        **dict.fromkeys(("noise", "sampling", "clipping", "steps", "divisor", "weights"), "pass"),
        "coverage": "not tested"}  # weights: the example hands its final weights to probe.save
    assert report["verdict"]["accounting"]["status"] == "verified"
    assert "whitebox_gradient" in report["attacks"]
    # the docstring's CLI lines, as written, on the folder the example wrote
    lines = [ln.strip() for ln in TORCH_FUNC.read_text().splitlines() if ln.strip().startswith("dpaudit ")][:2]
    for line in lines:
        argv = [a.replace("out/torch-func", str(tmp_path / "tf")) for a in shlex.split(line.split("#")[0])[1:]]
        assert main([*argv, *(["--quiet"] if argv[0] == "evaluate" else [])]) == 0, line


def test_torch_func_example_with_half_the_noise_fails_the_gate_naming_noise(tmp_path, capsys):
    ex = _example(TORCH_FUNC)
    out = tmp_path / "half"
    ex.train(ex.parser().parse_args(["--out", str(out), "--bug", "half-noise", "--epsilon", "4", *FUNC_SMALL]))
    capsys.readouterr()
    assert main(["evaluate", str(out / "model"), "--out", str(out / "cli"), "--quiet"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("mechanism-mismatch: ")
    assert main(["check", str(out / "cli" / "report.json")]) == 1
    fails = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FAIL")]
    assert any("mechanism check 'noise'" in ln for ln in fails), fails


def test_hugging_face_trainer_example_runs_with_the_probe_callback(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("audit_hf_trainer", ROOT / "examples" / "audit_hf_trainer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--out", str(tmp_path / "hf"), "--insecure-rng", "--records", "100", "--epochs", "2",
                     "--canaries", "20", "--references", "50", "--probe-canaries", "200"]) == 0
    report = json.loads((tmp_path / "hf" / "report" / "report.json").read_text())
    (entry,) = report["mechanism_checks"]
    assert entry["optimizer"] == "DPOptimizer" and entry["coordinates"] == "block"
    statuses = {c["check"]: c["status"] for c in entry["checks"]}
    assert statuses == dict.fromkeys(("noise", "sampling", "clipping", "steps", "divisor", "coverage", "weights"),
                                     "pass"), \
        entry["checks"]  # coverage: the callback hands the probe the Trainer's model
    assert (tmp_path / "hf" / "model" / "gradient_canaries.probe.npz").is_file()  # saved by the callback


def test_github_actions_workflow_runs_in_a_users_repository_shape():
    """The workflow for the user's repository (examples/github-actions.yml): a light gate job and a full evaluate
    job, each installing dpaudit from DPAUDIT_SOURCE (nothing of this checkout), every dpaudit line a command
    and options the CLI accepts. .ci/wheel_check.sh runs both jobs from the built wheel (.ci/run_workflow.py)."""
    import shlex

    import click
    import yaml

    from dpaudit.cli.main import cli

    flow = yaml.safe_load((ROOT / "examples" / "github-actions.yml").read_text())
    assert set(flow["jobs"]) == {"gate", "evaluate"}
    env = {k: str(v) for k, v in flow["env"].items()}
    runs = {name: [s["run"] for s in job["steps"] if "run" in s] for name, job in flow["jobs"].items()}
    installs = {name: [ln for r in rs for ln in r.splitlines() if "pip install" in ln and "dpaudit" in ln]
                for name, rs in runs.items()}
    assert installs["gate"] == ['pip install "dpaudit @ $DPAUDIT_SOURCE"']  # the light install: no [train]
    assert installs["evaluate"] == ['pip install "dpaudit[train] @ $DPAUDIT_SOURCE"']
    text = "\n".join(r for rs in runs.values() for r in rs)
    for banned in ("requirements", "-e .", "configs/"):  # none of this checkout's files
        assert banned not in text, banned
    lines = [ln.strip().split("; fi")[0].split("then ")[-1] for ln in text.splitlines() if "dpaudit " in ln
             and "pip install" not in ln]
    assert len(lines) == 4, lines
    for line in lines:
        for k, v in env.items():
            line = line.replace(f'"${k}"', v)
        args = shlex.split(line)
        assert args[0] == "dpaudit", line
        cmd, rest, ctx = cli, args[1:], cli.make_context("dpaudit", list(args[1:]), resilient_parsing=True)
        while isinstance(cmd, click.Group):
            _, cmd, rest = cmd.resolve_command(ctx, rest)
            ctx = cmd.make_context(cmd.name, list(rest), parent=ctx) if not isinstance(cmd, click.Group) else ctx
        assert cmd.name in ("check", "compare", "evaluate"), line
    # what the job shows and fails on: the gate and the diff on the job's summary page, the diff failing the job on
    # a tested regression; the checkpoint fetched (not in the repository), its sha256 checked before it is unpacked
    assert all('--summary "$GITHUB_STEP_SUMMARY"' in ln for ln in lines if " check " in ln or " compare " in ln)
    assert any(" compare " in ln and "--fail-on-regression" in ln for ln in lines)
    fetch = next(s["run"] for s in flow["jobs"]["evaluate"]["steps"] if "CHECKPOINT_URL" in s.get("run", ""))
    assert fetch.index("sha256sum --check") < fetch.index("tar -x"), fetch
    assert len(env["CHECKPOINT_SHA256"]) == 64 and env["CHECKPOINT"].startswith("model/")
