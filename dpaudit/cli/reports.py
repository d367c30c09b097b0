"""``dpaudit compare`` (two reports, what regressed) and ``dpaudit table`` (report tables from run folders). Light:
no torch."""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit.cli.help import summary_option
from dpaudit.errors import DpauditError
from dpaudit.report.table import COLUMNS as TABLE_COLUMNS


@click.command()
@click.argument("old_json", type=click.Path(path_type=Path))
@click.argument("new_json", type=click.Path(path_type=Path))
@click.option("--fail-on-regression", is_flag=True,
              help="Exit 1 when a row regressed by the test its row names: a deterministic value (claimed ε, the "
                   "accounting interval, the audit ceiling, the verdict, a mechanism check) moved the wrong way; an "
                   "attack AUC whose new 95% interval lies wholly above the old; accuracy lower by McNemar's exact "
                   "test at 5% (the same test examples) or Newcombe's 95% interval. Sampled values with no test "
                   "(TPR, exposure, the bound) are shown, never failed.")
@summary_option("the diff")
def compare(old_json, new_json, fail_on_regression, summary_md):
    """Markdown diff of two report.json files (evaluation or comparison), flagging what regressed by a stated
    test."""
    from dpaudit.gate.compare import compare as diff
    from dpaudit.gate.policy import load_report

    md, n = diff(load_report(old_json), load_report(new_json))
    if summary_md is not None:
        from dpaudit.gate import job_summary

        job_summary.append(summary_md, md)
    click.echo(md, nl=False)
    if fail_on_regression and n:
        raise SystemExit(1)


@click.command("table")
@click.argument("run_dirs", metavar="RUN...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--columns", required=True, metavar="NAME,...",
              help="Comma-separated columns, in order: " + ", ".join(TABLE_COLUMNS) + ".")
@click.option("--variant", "variants", multiple=True, metavar="NAME",
              help="Only these variants (repeatable or comma-separated, in this order). Default: every variant with "
                   "a report, by name.")
@click.option("--differences", default="", metavar="A:B,...",
              help="Also print the test-accuracy difference A − B of each pair: paired (McNemar's exact test and a "
                   "paired bootstrap 95% interval) where both reports carry per-example outcomes on the same test "
                   "examples, else Newcombe's unpaired 95% interval (conservative; reports before 2026-11-25).")
def table_cmd(run_dirs, columns, variants, differences):
    """One markdown row per variant of each RUN (the --out of `dpaudit run`; several: their rows in order), from
    the committed report.json, run.json and privacy_card.json files: the tables of reports/*/README.md come from
    here. A RUN may also be the --out of `dpaudit evaluate` (or its report.json): one row, named after the
    folder, for a checkpoint trained anywhere."""
    from dpaudit.report.report_folder import ReportFolder
    from dpaudit.report.table import differences as diff_table
    from dpaudit.report.table import table
    from dpaudit.run_folder import RunFolder

    runs = [ReportFolder(d) if ReportFolder.holds_one(d) else RunFolder(d) for d in run_dirs]
    pairs = [tuple(p.split(":")) for p in differences.split(",") if p.strip()]
    if any(len(p) != 2 or not all(p) for p in pairs):
        raise DpauditError(f"--differences takes pairs A:B separated by commas, got {differences!r}")
    variants = [v.strip() for vs in variants for v in vs.split(",") if v.strip()]
    out = table(runs, [c.strip() for c in columns.split(",") if c.strip()], variants)
    click.echo(out + ("\n" + diff_table(runs, pairs) if pairs else ""), nl=False)


@click.command("model-card")
@click.argument("report_json", type=click.Path(path_type=Path))
@click.option("--to", "card", required=True, type=click.Path(path_type=Path),
              help="The model card to write the audit into (a Hugging Face README.md; created when absent). Only "
                   "the section between the dpaudit markers and the front matter's tags change; writing again "
                   "replaces the section.")
@click.option("--ship-report", is_flag=True,
              help="Also copy REPORT_JSON beside the card as dpaudit_report.json (left out of the checkpoint's "
                   "hash), so that the card's re-check command, `dpaudit check dpaudit_report.json --checkpoint .`, "
                   "works from what ships with the model.")
def model_card_cmd(report_json, card, ship_report):
    """Write REPORT_JSON's audit (claim, verdict, accounting interval, best bound with its ceiling, mechanism
    checks) as a section of a Hugging Face model card, so that the audit travels with the model."""
    from dpaudit.gate.policy import load_report
    from dpaudit.report import model_card

    report = load_report(report_json)  # checked whole before a byte is copied
    out = model_card.write(report, str(report_json), card, ship=report_json.read_bytes() if ship_report else None)
    click.echo(f"wrote the dpaudit section of {out}")

