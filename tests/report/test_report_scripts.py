"""The tables committed under reports/ are what their scripts print from the committed report.json files today, so
a number in a README cannot drift from the run that made it (or from the script that formats it)."""

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
SCRIPTS = ROOT / "scripts"

# (script, run directory whose rows file it printed): what `dpaudit table` does not print
TABLES = [
    ("../experiments/pmixed_rows.py", "pmixed"),
]
ROWS_FILE = {"pmixed": "rows.md"}  # the others: rows.txt

# READMEs that show the table verbatim (the others quote rows from it in prose or in their own layout)
VERBATIM = {"li_repro_smollm2_table2text", "li_repro_smollm2_table2text_n2000", "li_repro_smollm2_table2text_pilot"}


def _run(script: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("script,run_dir", TABLES)
def test_rows_txt_is_what_the_script_prints(script, run_dir):
    out = _run(SCRIPTS / script, REPORTS / run_dir)
    assert out.returncode == 0, out.stderr
    rows = ROWS_FILE.get(run_dir, "rows.txt")
    assert out.stdout == (REPORTS / run_dir / rows).read_text(), f"regenerate {run_dir}/{rows} with {script}"
    if run_dir in VERBATIM:
        assert out.stdout.strip() in (REPORTS / run_dir / "README.md").read_text(), f"paste rows.txt into {run_dir}/README.md"


TABLE_COMMANDS = sorted((readme.parent, m.group(1)) for readme in REPORTS.glob("*/README.md")
                        for m in re.finditer(r"`(dpaudit table [^`]+)`", readme.read_text()))


def test_some_report_tables_come_from_dpaudit_table():
    assert len(TABLE_COMMANDS) >= 3


@pytest.mark.parametrize("folder,command", TABLE_COMMANDS, ids=[f.name for f, _ in TABLE_COMMANDS])
def test_rows_txt_is_what_its_readme_table_command_prints(folder, command, capsys):
    """The `dpaudit table ...` command a report's README names prints its rows.txt, byte for byte."""
    import shlex

    from dpaudit.cli import main

    argv = shlex.split(command)[1:]
    target = folder / "rows.txt"
    if ">" in argv:  # `dpaudit table ... > reports/X/rows.md`
        target = ROOT / argv[argv.index(">") + 1]
        argv = argv[:argv.index(">")]
    assert main(argv) == 0
    assert capsys.readouterr().out == target.read_text(), f"regenerate {target.relative_to(ROOT)}: {command}"
    if folder.name in VERBATIM:
        assert target.read_text().strip() in (folder / "README.md").read_text()


def test_table_refuses_unknown_columns_and_missing_variants(capsys):
    from dpaudit.cli import main

    for extra, needle in ((["--columns", "variant,telepathy"], "unknown column 'telepathy'"),
                          (["--columns", "variant", "--variant", "nope"], "no report"),
                          (["--columns", "variant", "--differences", "full-eps8"], "pairs A:B"),
                          (["--columns", "variant", "--differences", "full-eps8:nope"], "'nope' has no report")):
        assert main(["table", str(REPORTS / "li_repro_minilm_mean"), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1
    empty = REPORTS / "demo" / "non-private" / "checkpoint"  # a folder, but no run's: says what to pass
    assert main(["table", str(empty), "--columns", "variant"]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no variant with a report" in err and "--out of a `dpaudit run`" in err, err


def test_pmixed_counterexample_table_is_what_the_script_prints():
    out = _run(SCRIPTS / "pmixed_counterexample.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (REPORTS / "pmixed" / "counterexample.md").read_text(), \
        "regenerate reports/pmixed/counterexample.md with scripts/pmixed_counterexample.py"


def test_pmixed_sweep_table_is_what_the_script_prints_from_its_json():
    out = _run(SCRIPTS / "pmixed_sweep.py", "--table", REPORTS / "pmixed" / "sweep.json")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (REPORTS / "pmixed" / "sweep.md").read_text(), \
        "regenerate reports/pmixed/sweep.md with scripts/pmixed_sweep.py --table reports/pmixed/sweep.json"


def test_whitebox_statistics_table_is_what_the_script_prints():
    out = _run(SCRIPTS / "whitebox_statistics.py", "reports/demo_lm", "reports/li_repro_sentiment")
    assert out.returncode == 0, out.stderr
    assert (REPORTS / "bench" / "whitebox_statistics.md").read_text().endswith("\n\n" + out.stdout), \
        "regenerate reports/bench/whitebox_statistics.md with scripts/whitebox_statistics.py"


def test_noise_checks_table_is_what_the_script_prints_and_no_honest_run_is_short():
    out = _run(SCRIPTS / "noise_checks.py", "reports/demo", "reports/demo_lm", "reports/li_repro_sentiment")
    assert out.returncode == 0, out.stderr
    assert (REPORTS / "bench" / "noise_checks.md").read_text().endswith("\n\n" + out.stdout), \
        "regenerate reports/bench/noise_checks.md with scripts/noise_checks.py"
    rows = [r for r in out.stdout.splitlines()[2:] if r.startswith("| ")]
    assert len(rows) >= 9 and all(r.endswith("| no shortfall |") for r in rows)


def _copy_reports(src: Path, dst: Path, names: list[str]) -> None:
    for name in names:
        (dst / name / "report").mkdir(parents=True)
        shutil.copy(src / name / "report" / "report.json", dst / name / "report" / "report.json")
        if (src / name / "checkpoint").is_dir():
            (dst / name / "checkpoint").mkdir()
            shutil.copy(src / name / "checkpoint" / "run.json", dst / name / "checkpoint" / "run.json")


def test_trend_plot_puts_one_run_per_point_on_the_line(tmp_path):
    src, script = REPORTS / "li_repro_smollm2_table2text_n2000", SCRIPTS / "trend_table2text.py"
    _copy_reports(src, tmp_path, ["full-eps8", "full-nonprivate"])
    assert _run(script, tmp_path).returncode == 0 and (tmp_path / "trend.png").stat().st_size > 0
    shutil.copytree(tmp_path / "full-nonprivate", tmp_path / "full-nonprivate-b")
    out = _run(script, tmp_path)  # two non-private full runs, neither named tuned: refused, not drawn as a zigzag
    assert out.returncode == 1 and "name exactly one of them '*-tuned'" in out.stderr
    (tmp_path / "full-nonprivate-b").rename(tmp_path / "full-nonprivate-tuned")
    assert _run(script, tmp_path).returncode == 0


def test_learning_rate_choice_reads_validation_runs_only(tmp_path):
    src, script = REPORTS / "li_repro_smollm2_table2text_n2000", SCRIPTS / "choose_lr.py"
    _copy_reports(src, tmp_path, ["full-nonprivate"])
    (tmp_path / "full-nonprivate").rename(tmp_path / "full-nonprivate-lr2e-3")
    out = _run(script, tmp_path)  # a test-split report may not pick a hyperparameter
    assert out.returncode == 1 and "only validation runs may choose" in out.stderr
    for name, lr, bleu in (("full-nonprivate-lr2e-3", 2e-3, 60.0), ("full-nonprivate-lr3e-4", 3e-4, 70.0)):
        if not (tmp_path / name).exists():
            shutil.copytree(tmp_path / "full-nonprivate-lr2e-3", tmp_path / name)
        rep, run = tmp_path / name / "report" / "report.json", tmp_path / name / "checkpoint" / "run.json"
        r, j = json.loads(rep.read_text()), json.loads(run.read_text())
        r["metrics"].update(split="validation", bleu=bleu)
        j["trainer"]["lr"] = lr
        rep.write_text(json.dumps(r))
        run.write_text(json.dumps(j))
    out = _run(script, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "chosen: lr 0.0003 (full-nonprivate-lr3e-4, validation BLEU 70.0) among 2 of 4" in out.stdout
    shutil.copytree(tmp_path / "full-nonprivate-lr3e-4", tmp_path / "full-eps8")
    out = _run(script, tmp_path)  # a run that is not one of the config's rates
    assert out.returncode == 1 and "is not a variant of" in out.stderr


def test_committed_learning_rate_choice_is_what_the_rule_picks_and_the_tuned_row_uses_it():
    lr_dir = REPORTS / "li_repro_smollm2_table2text_n2000_lr"
    out = _run(SCRIPTS / "choose_lr.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout == (lr_dir / "choice.txt").read_text(), "regenerate choice.txt with choose.py"
    assert out.stdout.strip() in (lr_dir / "README.md").read_text(), "paste choice.txt into the README"
    chosen = float(re.search(r"^chosen: lr (\S+) ", out.stdout, re.M).group(1))
    cfg = tomllib.loads((ROOT / "configs/li_repro_smollm2_table2text_n2000_full.toml").read_text())
    tuned = [v for v in cfg["variants"] if v["name"] == "full-nonprivate-tuned"]
    assert len(tuned) == 1 and tuned[0]["lr"] == chosen, "the tuned variant must use the chosen rate"
    run = REPORTS / "li_repro_smollm2_table2text_n2000/full-nonprivate-tuned/checkpoint/run.json"
    j = json.loads(run.read_text())  # the committed test-split row was trained at that rate
    assert j["trainer"]["lr"] == chosen and j["variant"] == "full-nonprivate-tuned"


def test_no_code_under_reports():
    """Scripts live in scripts/ (linted with the package); reports/ holds results only."""
    assert not [p for p in REPORTS.rglob("*.py")], "move scripts from reports/ to scripts/"


def test_report_readmes_state_the_date_and_machine_of_their_reports():
    """Every committed report README carries the "Date and machine" line its own report.json files give."""
    out = _run(SCRIPTS / "report_provenance.py", "--check")
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_committed_bound_exceeds_a_verified_claim():
    # an honest claim (its accounting verified from the committed card) is never accused: no record-level
    # one-run bound at the claimed delta above the claimed epsilon, and no `violated` verdict, in any report
    seen = 0
    for f in sorted(REPORTS.rglob("report.json")):
        r = json.loads(f.read_text())
        verdict = r.get("verdict") or {}
        if "claim" not in r or (verdict.get("accounting") or {}).get("status") != "verified":
            continue
        seen += 1
        eps = r["claim"]["epsilon"]
        assert verdict["status"] != "violated", f
        for e in r.get("empirical", []):
            if e["delta_kind"] == "claimed" and e["group_size"] == 1:
                assert e["epsilon_lb"] <= eps, (f.relative_to(ROOT), e["attack"], e["epsilon_lb"], eps)
    assert seen >= 20  # the Li et al. reproductions, the demos, DP-FROST, user-level DP


def test_committed_report_md_is_what_the_renderer_prints():
    out = _run(SCRIPTS / "render_reports.py", "--check")
    assert out.returncode == 0, out.stdout + out.stderr


def test_probe_bug_table_is_what_its_runs_print():
    """reports/probe: table.md is experiments/probe_bugs.py's table of the committed runs.json, and the README
    shows that table."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("probe_bugs", ROOT / "experiments" / "probe_bugs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    folder = ROOT / "reports" / "probe"
    rows = json.loads((folder / "runs.json").read_text())
    assert len(rows) == 120 and {r["bug"] for r in rows} == set(mod.NAMED)
    table = mod.table(rows)
    assert (folder / "table.md").read_text() == table
    assert table.strip() in (folder / "README.md").read_text()


def _numbers(text: str) -> set[str]:
    """Decimal numbers of a text, signs normalised (− to -, a leading + dropped)."""
    text = text.replace("−", "-").replace("\u2009", " ")
    return {m.group(0).lstrip("+") for m in re.finditer(r"[-+]?\d+\.\d+", text)}


def test_every_number_of_a_reproduction_row_is_in_its_report():
    """docs/reproductions.md summarises each report in one table row: every decimal number in that row must appear
    in the report's README or rows file (which the tests above tie to report.json), so a headline cannot drift
    from the runs behind it."""
    doc = (ROOT / "docs" / "reproductions.md").read_text()
    checked = 0
    for row in doc.splitlines():
        m = re.match(r"\| \[(\w+)\]\(\.\./reports/(\w+)/README\.md\)", row)
        if not m:
            continue
        have = set()
        for linked in re.findall(r"\.\./reports/(\w+)/README\.md", row):  # the row's report and any it links
            for name in ("README.md", "rows.md", "rows.txt"):
                if (REPORTS / linked / name).exists():
                    have |= _numbers((REPORTS / linked / name).read_text())
        cells = "|".join(row.split("|")[3:])  # the paper's own numbers (column 2) come from the paper, not the report
        cells = re.sub(r"\(paper[^)]*\)|paper: [-\d.]+", "", cells)  # nor do those quoted as the paper's
        missing = sorted(_numbers(cells) - have)
        assert not missing, f"{m.group(2)}: {missing} in docs/reproductions.md are not in its report"
        checked += 1
    assert checked >= 5


def test_the_claim_counts_quoted_are_the_what_was_tested_table():
    """The counts docs/reproductions.md quotes from reports/what_was_tested are that table's rows, counted."""
    table = (REPORTS / "what_was_tested" / "README.md").read_text()
    rows = [r.split("|") for r in table.splitlines() if r.startswith("| ") and not r.startswith(("| report", "|---"))]
    claims = len(rows)
    verified = sum(r[3].strip() == "verified" for r in rows)
    not_refuted = sum(r[-2].strip() == "`underpowered`" for r in rows)  # the verdict now
    doc = (ROOT / "docs" / "reproductions.md").read_text()
    m = re.search(r"of its (\d+) claims the accountants verify (\d+).*?(\d+) audits could not reach their claim", doc,
                  flags=re.S)
    assert m, "docs/reproductions.md must quote what_was_tested's counts"
    assert tuple(map(int, m.groups())) == (claims, verified, not_refuted)


def test_machine_names_the_gpu_that_made_a_report(monkeypatch):
    """A report made on a GPU says which (reproducibility.machine.accelerator), and the provenance line of its
    README names it beside the CPU runs; a CPU run records none."""
    import torch

    from dpaudit.report import build as report_build

    assert report_build.machine()["accelerator"] is None or torch.cuda.is_available()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    assert report_build.machine()["accelerator"] == "NVIDIA H100 80GB HBM3"
    line = (ROOT / "reports" / "canary_designs" / "README.md").read_text().splitlines()[2]
    assert "NVIDIA H100 80GB HBM3 (a lent GPU machine)" in line and "2 CPUs (the project's CPU machine)" in line


def test_lmo_limits_table_is_what_the_script_prints():
    """reports/lmo_dp/limits.md: each LMO-DP claim against the proven interval and the sound methods' floors. One
    row is re-made live (claimed 0.3, the one no method settles: the README's reading rests on its floors; 3 s, where
    the refuted eps = 3 row's accounting takes 48 s), and the table holds exactly the variants the README's command
    names; the whole table is that command's output (a consistency check of the committed file)."""
    md = (REPORTS / "lmo_dp" / "limits.md").read_text()
    command = re.search(r"`(python scripts/lmo_limits\.py [^`>]+) > reports/lmo_dp/limits\.md`",
                        (REPORTS / "lmo_dp" / "README.md").read_text())
    assert command, "name the command that writes limits.md in reports/lmo_dp/README.md"
    import shlex

    argv = shlex.split(command.group(1))[2:]
    variants = [argv[i + 1] for i, a in enumerate(argv) if a == "--variant"]
    head, rows = md.splitlines()[:2], md.splitlines()[2:]
    assert [r.split(" | ")[0].lstrip("| ") for r in rows] == variants
    live = "lmo-eps0p3"
    out = _run(ROOT / shlex.split(command.group(1))[1], argv[0], "--variant", live)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == head + [r for r in rows if r.startswith(f"| {live} |")], (
        "regenerate reports/lmo_dp/limits.md with scripts/lmo_limits.py")


def test_pmixed_search_markdown_is_what_its_json_renders():
    from dpaudit.pmixed import search

    folder = REPORTS / "pmixed" / "worst_case"
    r = json.loads((folder / "search.json").read_text())
    assert (folder / "SEARCH.md").read_text() == search.render(r)
    assert r["worst"]["max_per_query"] >= r["baseline"]["best"]["max_per_query"]
    assert r["command"].startswith("dpaudit pmixed search reports/pmixed/pmixed-eps8-retrain/checkpoint --out "
                                   "reports/pmixed/worst_case")
    # the README's numbers are the JSON's
    readme = (REPORTS / "pmixed" / "README.md").read_text()
    claim = r["claimed_per_query"]
    for value in (r["baseline"]["best"]["max_per_query"], r["pool"]["best"]["max_per_query"]):
        assert f"| {value:.6f} " in readme and f"{value / claim:.2f}×" in readme
    w = r["worst"]
    assert f"**{w['max_per_query']:.6f}**" in readme and f"**{w['ratio_to_claim']:.2f}×**" in readme
    assert f"true ε ≥ {w['epsilon_lower_T_repeats']:.2f}" in readme
    o = r["other_reading"]
    assert f"reaches {o['max_per_query']:.5f} = {o['ratio_to_claim']:.2f}×" in readme
    assert f"{r['pool']['positions']:,} positions" in readme and f"Spearman {r['pool']['screen_vs_exact_spearman']:.2f}" in readme
    assert r["subsets"]["largest_ratio_to_claim"] == pytest.approx(1.0) and "largest ratio 1.0" in readme


def test_canary_gradient_share_is_what_the_eps4_readme_says(capsys):
    """reports/canary_designs_eps4: the tiny GPT-2's share of an inserted new-token canary's clipped gradient on its
    own embedding rows (the README's 0.19, 64 canaries) is what experiments/canary_gradient_share.py measures on the
    committed run's manifest; SmolLM2's 0.28 needs the converted model, not checked here. The script's main() runs
    in this process (its command line is the one below; a process of its own would spend 8 s importing)."""
    from tests.scripts_loader import load_script

    script = load_script("experiments", "canary_gradient_share")
    capsys.readouterr()
    assert script.main([str(ROOT / "configs" / "canary_designs_eps4" / "full_batch_new_token.toml"),
                        str(REPORTS / "canary_designs_eps4" / "full_batch_new_token"), "--n", "64"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["model"] == "tiny-gpt2" and row["canaries"] == 64
    q25, q50, q75 = row["own_share_q25_q50_q75"]
    assert f"{q50:.2f}" == "0.19" and q75 - q25 < 0.04
    readme = (REPORTS / "canary_designs_eps4" / "README.md").read_text()
    assert "**0.19 for the tiny GPT-2** (norm 14)" in readme and f"(norm {row['grad_norm_q25_q50_q75'][1]:.0f})" in readme


def test_the_demo_numbers_the_readme_quotes_are_its_reports():
    """A consistency check, not evidence: README.md's demo sentence and reports/demo/README.md's table quote the
    accuracies and LOSS AUCs of reports/demo's report.json files (re-made by `make demo-refresh`), to 3 decimals."""
    got = {}
    for variant in ("non-private", "dp-eps8"):
        r = json.loads((REPORTS / "demo" / variant / "report" / "report.json").read_text())
        got[variant] = (f"{r['metrics']['accuracy']:.3f}", f"{r['attacks']['loss']['auc']:.3f}",
                        f"{r['metrics']['constant_predictor_accuracy']:.3f}")
    readme = re.sub(r"\s+", " ", (ROOT / "README.md").read_text())
    (dp_acc, dp_auc, const), (np_acc, np_auc, _) = got["dp-eps8"], got["non-private"]
    assert (f"keeps test accuracy {dp_acc} (non-private {np_acc}, constant predictor {const})" in readme
            and f"(AUC {dp_auc}, non-private {np_auc})" in readme), got
    table = (REPORTS / "demo" / "README.md").read_text()
    assert f"| non-private | **{np_acc}** | **{np_auc}** |" in table and f"| DP, ε = 8 | **{dp_acc}** | **{dp_auc}** |" in table
