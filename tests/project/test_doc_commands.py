"""The cheap command examples of README.md and docs/ run as written, so they cannot rot.

Every ```bash block is run line by line in a fresh folder (``mkdir -p`` and the cheap ``dpaudit``
commands: account, audit one-run/many-run, canaries new, card); a trailing ``# exit N`` states an expected
non-zero exit. Every command of docs/commands.md's table answers ``--help``; README.md stays under 12 kB.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dpaudit.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CHEAP = (("account",), ("audit", "one-run"), ("audit", "many-run"), ("audit", "plan"), ("audit", "strategy"), ("canaries", "new"), ("card",),
         ("lmo", "account"))


BASE_MODEL_LINE = "--base-model my-base"


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
        if run is None or BASE_MODEL_LINE in line:  # those run in test_canary_designs.py, with a base model saved
            continue
        argv, expected = run
        rc = main(argv)
        out = capsys.readouterr()
        assert rc == expected, f"{doc.name}: `{line}` exited {rc}: {out.err or out.out}"


def test_readme_stays_a_first_page():
    """What it is, the two commands, the journey, the verdict table, links: at most 12 kB (the rest is in docs/)."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 12_000, f"README.md is {size} bytes; move detail into docs/"


def test_every_listed_command_has_help(capsys):
    rows = re.findall(r"^\| `dpaudit ([a-z-]+(?: [a-z-]+)?)", (ROOT / "docs" / "commands.md").read_text(), flags=re.M)
    assert len(rows) >= 10
    for row in rows:
        words = [w for w in row.split() if not w.isupper()]
        argv = words[:2] if words[0] in ("audit", "canaries") else words[:1]
        assert main([*argv, "--help"]) == 0, row
        assert "Usage" in capsys.readouterr().out


def test_readme_four_step_journey_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's path for a model trained elsewhere, through the CLI: steps 1 and 3 are its bash lines as
    written; step 2 is any training loop (a tiny GPT-2 on the canary records and public text); step 4 saves
    the model into my-model/ and runs the README's own `dpaudit evaluate` line."""
    import json
    import random

    import torch

    from dpaudit.tasks.models import public_bpe_tokenizer

    monkeypatch.chdir(tmp_path)
    text = (ROOT / "README.md").read_text()
    for line in _bash_lines(text):  # steps 1 and 3
        if line.startswith("mkdir -p "):
            for d in shlex.split(line)[2:]:
                Path(d).mkdir(parents=True, exist_ok=True)
        elif _runnable(line):
            argv, expected = _runnable(line)
            assert main(argv) == expected, line
    records = [json.loads(ln)["text"] for ln in Path("canary_records.jsonl").read_text().splitlines()]
    rng = random.Random(0)
    words = ["river", "market", "window", "garden", "engine", "letter", "summer", "silver"]
    texts = records + [f"The {rng.choice(words)} was {rng.choice(words)} today." for _ in range(200)]
    # step 2: any loop; here plain Adam on tokenizer(text), as a Hugging Face loop feeds records
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = public_bpe_tokenizer(512)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                       bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                                       pad_token_id=tok.eos_token_id))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    enc = tok(texts, padding="max_length", truncation=True, max_length=24, return_tensors="pt")
    for i in range(0, len(texts), 64):
        ids, mask = enc["input_ids"][i:i + 64], enc["attention_mask"][i:i + 64]
        loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained("my-model")  # step 4, then the README's command as written
    tok.save_pretrained("my-model")
    command = re.search(r"`(dpaudit evaluate my-model[^`]*)`", text).group(1)
    capsys.readouterr()
    assert main(shlex.split(command)[1:] + ["--quiet"]) == 0, capsys.readouterr().err
    report = json.loads(Path("my-model-report/report.json").read_text())
    assert report["claim"]["epsilon"] == 1.47 and report["audit_plan"]["status"] == "as planned"
    assert report["canary_plan"]["m"] == 500 and report["canary_plan"]["framing"] == "tokenizer"
    assert report["verdict"]["accounting"]["status"] == "verified"
