"""The audit on the model card (dpaudit/report/model_card.py, `dpaudit model-card`): the section states the
claim, verdict, accounting interval, best bound with its ceiling and the mechanism checks; writing it again changes
nothing; the rest of the card is kept; Hugging Face's own parser reads the tags; the checkpoint hash (what
`check --checkpoint` re-derives) does not cover it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dpaudit.cli import main
from dpaudit.options import verdict_name

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
CARD = "---\nlicense: apache-2.0\ntags:\n- text-generation\n---\n# My model\n\nTrained on my data.\n"


def test_the_section_says_what_the_report_says(tmp_path, capsys):
    r = json.loads(REPORT.read_text())
    assert main(["model-card", str(REPORT), "--to", str(tmp_path / "README.md")]) == 0
    text = (tmp_path / "README.md").read_text()
    b, a = r["empirical_best"], r["accounting"]
    assert f"ε = {r['claim']['epsilon']:.4g} at δ = 1e-05" in text and f"`{verdict_name(r['verdict']['status'])}`" in text
    assert f"true ε in [{a['lower_epsilon']:.4g}, {a['certified_epsilon']:.4g}]" in text
    assert f"ε ≥ {b['epsilon_lb']:.3g}" in text and f"the most this test could show: {b['ceiling']:.3g}" in text
    assert "noise pass, sampling pass, clipping pass, steps pass, divisor pass" in text
    assert r["checkpoint"]["hash"] in text


def test_writing_twice_is_writing_once_and_the_rest_of_the_card_is_kept(tmp_path):
    from huggingface_hub import ModelCard

    card = tmp_path / "README.md"
    card.write_text(CARD)
    assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    once = card.read_text()
    assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    assert card.read_text() == once
    assert "# My model\n\nTrained on my data.\n" in once and "license: apache-2.0" in once
    assert ModelCard(once).data.tags == ["text-generation", "differential-privacy", "dpaudit"]


def test_the_checkpoint_hash_does_not_cover_the_model_card(tmp_path):
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.checkpoint import Checkpoint
    from dpaudit.claim.card import load_card

    shutil.copytree(ROOT / "reports" / "demo" / "dp-eps8" / "checkpoint", tmp_path / "ck")
    ck = Checkpoint(path=tmp_path / "ck", card=load_card(tmp_path / "ck" / "privacy_card.json"),
                    manifest=generate(CanaryPlan(m=4, repetitions=1)), run={})
    before = ck.hash()
    assert main(["model-card", str(REPORT), "--to", str(tmp_path / "ck" / "README.md")]) == 0
    assert ck.hash() == before


@pytest.mark.slow
def test_the_report_shipped_with_the_model_re_checks_from_the_models_own_folder(run_dir, tmp_path, capsys):
    """`model-card --ship-report`: the report travels beside the weights as dpaudit_report.json, outside the
    checkpoint's hash, and the card's re-check command works as written, from the model's folder alone."""
    import os

    from dpaudit.checkpoint import load

    ck = tmp_path / "model"
    shutil.copytree(run_dir / "dp" / "checkpoint", ck)
    before = load(ck).hash()
    report = run_dir / "dp" / "report" / "report.json"
    assert main(["model-card", str(report), "--to", str(ck / "README.md"), "--ship-report"]) == 0
    assert (ck / "dpaudit_report.json").read_bytes() == report.read_bytes()
    assert load(ck).hash() == before
    card = (ck / "README.md").read_text()
    command = "dpaudit check dpaudit_report.json --checkpoint ."
    assert f"`{command}`" in card
    capsys.readouterr()
    here = os.getcwd()
    try:
        os.chdir(ck)
        assert main(command.split()[1:]) == 0, capsys.readouterr().out
    finally:
        os.chdir(here)
    assert "agree" in capsys.readouterr().out


@pytest.mark.parametrize("setup,needle", [
    (lambda d: (d / "README.md").mkdir(), "not a file"),
    (lambda d: (d / "README.md").write_text("<!-- dpaudit:begin -->\nhalf"), "markers"),
    (lambda d: (d / "README.md").write_text("---\ntags: 5\n---\nx\n"), "list of strings"),
    (lambda d: (d / "README.md").write_text("---\ntags: [a\n---\nx\n"), "not valid YAML"),
    (lambda d: (d / "README.md").write_text("---\nno end\n"), "never closes"),
    (lambda d: (d / "README.md").write_text("---\n- a\n- b\n---\nx\n"), "not a YAML mapping"),
    (lambda d: (d / "README.md").write_text("---\n[a, b]\n---\nx\n"), "not a YAML mapping"),
    (lambda d: (d / "README.md").write_text("---\nmodel-index: 5\n---\nx\n"), "not a list of {name, results}"),
    (lambda d: (d / "README.md").write_text("---\nmodel-index:\n- results: 3\n---\nx\n"), "not a list of {name, results}"),
    # the Hub keeps the last of two keys; rewriting the card dropped the user's first license and tags silently
    (lambda d: (d / "README.md").write_text("---\nlicense: mit\ntags:\n- a\nlicense: apache-2.0\n---\nx\n"),
     "names the key 'license' twice"),
    (lambda d: (d / "README.md").write_text("---\nwidget:\n  text: a\n  text: b\n---\nx\n"), "names the key 'text' twice"),
], ids=["a folder", "one marker", "tags a number", "broken YAML", "unclosed front matter", "a list", "a flow list",
        "model-index a number", "results a number", "a key twice", "a nested key twice"])
def test_a_card_it_cannot_edit_safely_is_refused_in_one_line(setup, needle, tmp_path, capsys):
    setup(tmp_path)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert main(["model-card", str(REPORT), "--to", str(tmp_path / "README.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before


def test_a_comparison_report_is_not_a_models(tmp_path, capsys):
    assert main(["model-card", str(ROOT / "reports" / "demo" / "report.json"), "--to", str(tmp_path / "R.md")]) == 2
    assert "one model's evaluation report" in capsys.readouterr().err


FRONTS = {
    "indented block list": ("license: mit\ntags:\n  - gpt2\n  - text-generation\nbase_model: gpt2\n", ["gpt2", "text-generation"]),
    "flush block list": ("tags:\n- gpt2\n", ["gpt2"]),
    "flow list": ("tags: [gpt2, 'a: b']\nlicense: mit\n", ["gpt2", "a: b"]),
    "one string": ("tags: gpt2\n", ["gpt2"]),
    "empty tags": ("tags:\nlicense: mit\n", []),
    "no tags, a comment": ("# my card\nlicense: mit  # the licence\n", []),
    "nested metadata": ("model-index:\n- name: m\n  results: []\ntags:\n    - x\n", ["x"]),
    "another tool's result": ("model-index:\n- name: m\n  results:\n  - task: {type: text-generation}\n    dataset: "
                              "{type: wikitext, name: WikiText}\n    metrics:\n    - {type: perplexity, value: 20.5}\n",
                              []),
    "no front matter": (None, []),
}


@pytest.mark.parametrize("name", FRONTS)
def test_the_front_matter_parses_with_the_hubs_loader_in_every_list_style(name, tmp_path):
    """The card dpaudit writes parses with huggingface_hub's ModelCard (its metadata loader), keeps every other key
    and the user's tags first, and writing again changes nothing (issue wave 5 · 4/5, item 5)."""
    import yaml
    from huggingface_hub import ModelCard

    front, tags = FRONTS[name]
    card = tmp_path / "README.md"
    card.write_text(("" if front is None else f"---\n{front}---\n") + "# My model\n")
    assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    text = card.read_text()
    data = ModelCard(text).data.to_dict()
    assert data["tags"] == tags + ["differential-privacy", "dpaudit"], data
    before = yaml.safe_load(front) if front else {}
    mine = ("tags", "model-index")
    assert {k: v for k, v in data.items() if k not in mine} == {k: v for k, v in (before or {}).items() if k not in mine}
    # the audit's numbers as the Hub's model-index result, read back by its own parser
    r = json.loads(REPORT.read_text())
    got = {e.metric_type: e.metric_value for e in ModelCard(text).data.eval_results
           if e.dataset_type == "dpaudit-canaries"}
    assert got == pytest.approx({"dp_epsilon_claimed": r["claim"]["epsilon"],
                                 "dp_epsilon_certified": r["accounting"]["certified_epsilon"],
                                 "dp_epsilon_empirical_lower_bound": r["empirical_best"]["epsilon_lb"]}, rel=1e-5)
    assert data["model-index"][0]["name"] == ("m" if name in ("nested metadata", "another tool's result") else "model")
    if name == "indented block list":
        assert "  - gpt2\n  - text-generation\n  - differential-privacy\n" in text  # its own indentation
    if name == "no tags, a comment":
        assert "# my card" in text and "# the licence" in text  # comments kept where the text can be extended
    if name == "another tool's result":  # kept beside dpaudit's
        assert data["model-index"][0]["results"][0]["metrics"] == [{"type": "perplexity", "value": 20.5}]
    assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    assert card.read_text() == text  # dpaudit's result replaced by itself, not added twice


@pytest.mark.parametrize("raw", ["\ufeff---\nlicense: mit\n---\n# M\n", "\n\n---\nlicense: mit\n---\n# M\n",
                                 "---\nlicense: mit\n---", "---\r\nlicense: mit\r\n---\r\n# M\r\n"],
                         ids=["a byte-order mark", "blank lines first", "closed at the end of the file", "CRLF"])
def test_a_front_matter_the_hub_reads_is_the_one_extended(raw, tmp_path):
    """Where huggingface_hub finds a card's metadata (after blank lines; closed by '---' at the end of the file),
    dpaudit finds it too (a BOM, which Windows editors write, is dropped): before, a second front matter was put
    above it (the user's licence pushed into the body) or the card was refused as never closing."""
    from huggingface_hub import ModelCard

    card = tmp_path / "README.md"
    card.write_bytes(raw.encode())
    assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    text = card.read_text(encoding="utf-8")
    data = ModelCard(text).data.to_dict()
    assert data["license"] == "mit" and data["tags"] == ["differential-privacy", "dpaudit"]
    assert text.count("---\n") == 2 and text.startswith("---\n") and "license: mit" not in text.split("---\n", 2)[2]


def test_a_card_written_on_windows_keeps_its_line_endings(tmp_path):
    """A CRLF card gets its section in CRLF and keeps every other line's ending: before, the whole card came back
    in LF, a diff of every line in the user's repository. An LF card stays LF."""
    crlf, lf = tmp_path / "crlf.md", tmp_path / "lf.md"
    crlf.write_bytes(CARD.replace("\n", "\r\n").encode())
    lf.write_bytes(CARD.encode())
    for card in (crlf, lf, crlf):
        assert main(["model-card", str(REPORT), "--to", str(card)]) == 0
    raw = crlf.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n") > 20 and b"\r\r" not in raw
    assert raw.startswith(CARD.replace("\n", "\r\n").split("tags:")[0].encode())
    assert b"\r" not in lf.read_bytes()
    assert crlf.read_bytes().replace(b"\r\n", b"\n") == lf.read_bytes()
