"""The cheap command examples of README.md and docs/ run as written, so they cannot rot.

Every ```bash block is run line by line in a fresh folder (``mkdir -p`` and the cheap ``dpaudit``
commands: account, audit one-run/many-run, canaries new, card); a trailing ``# exit N`` states an expected
non-zero exit. Every command of the README's table answers ``--help``.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHEAP = (("account",), ("audit", "one-run"), ("audit", "many-run"), ("canaries", "new"), ("card",), ("lmo", "account"))


def _bash_lines(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _runnable(line: str) -> tuple[list[str], int] | None:
    """(argv after 'dpaudit', expected exit code) for a cheap dpaudit command; None for anything else."""
    code, _, comment = line.partition(" #")
    if not code.startswith("dpaudit "):
        return None
    argv = shlex.split(code)[1:]
    if not any(tuple(argv[:len(c)]) == c for c in CHEAP):
        return None
    m = re.search(r"exit (\d)", comment)
    return argv, int(m.group(1)) if m else 0


def test_docs_have_cheap_examples():
    found = [ln for doc in DOCS for ln in _bash_lines(doc.read_text()) if _runnable(ln)]
    assert any(ln.startswith("dpaudit canaries new") for ln in found)
    assert any(ln.startswith("dpaudit card") for ln in found) and any("--card" in ln for ln in found)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_bash_examples_run(doc, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for line in _bash_lines(doc.read_text()):
        if line.startswith("mkdir -p "):
            for d in shlex.split(line)[2:]:
                Path(d).mkdir(parents=True, exist_ok=True)
            continue
        run = _runnable(line)
        if run is None:
            continue
        argv, expected = run
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == expected, f"{doc.name}: `{line}` exited {rc}: {out.err or out.out}"


def test_every_listed_command_has_help(capsys):
    rows = re.findall(r"^\| `dpaudit ([a-z-]+(?: [a-z-]+)?)", (ROOT / "README.md").read_text(), flags=re.M)
    assert len(rows) >= 10
    for row in rows:
        words = [w for w in row.split() if not w.isupper()]
        argv = words[:2] if words[0] in ("audit", "canaries") else words[:1]
        assert main([*argv, "--help"]) == 0, row
        assert "Usage" in capsys.readouterr().out
