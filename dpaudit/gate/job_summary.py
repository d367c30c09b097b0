"""The gate's and the diff's markdown for a CI job's summary page (GitHub Actions: the file ``$GITHUB_STEP_SUMMARY``
names, appended to by each step). ``dpaudit check --summary FILE`` and ``dpaudit compare --summary FILE`` append here;
every string that came from a report is escaped (:mod:`dpaudit.markup`), so a report cannot write a line of its own
into the page."""

from __future__ import annotations

from pathlib import Path

from dpaudit.io import open_append
from dpaudit.markup import md, md_code


def gate_markdown(report: Path, fails: list[str], summaries: list[str], checked: str) -> str:
    """One section: passed or failed, one FAIL line per failure, the report's headline, and what was checked."""
    word = "failed" if fails else "passed"
    lines = [f"### dpaudit check: {word} — `{md_code(report)}`", ""]
    lines += [f"- **FAIL** {md(f)}" for f in fails]
    lines += [f"- {md(s)}" for s in summaries]
    lines += ["", f"_{md(checked)}_", ""]
    return "\n".join(lines) + "\n"


def append(path: Path, markdown: str) -> None:
    """Append ``markdown`` to the summary file ``path`` (created when missing; a link planted under its name is
    refused in one line, :func:`dpaudit.io.open_append`)."""
    with open_append(Path(path), "job summary") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
