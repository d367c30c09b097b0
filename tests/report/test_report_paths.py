"""A report names the project's folders, never the machine's: a checkpoint inside the working folder is recorded
by its relative path however it was given (``dpaudit run`` passes absolute ones), one outside it as given."""

from pathlib import Path

from dpaudit.io import shown_path
from dpaudit.report import build


def test_a_checkpoint_inside_the_working_folder_is_recorded_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ck = tmp_path / "reports" / "run" / "dp" / "checkpoint"
    assert shown_path(ck) == "reports/run/dp/checkpoint"
    assert shown_path("reports/run/dp/checkpoint") == "reports/run/dp/checkpoint"
    outside = tmp_path.parent / "elsewhere" / "checkpoint"
    assert shown_path(outside) == str(outside)


def test_the_report_head_records_the_shown_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ck = Path(tmp_path / "out" / "checkpoint")
    monkeypatch.setattr(build, "claim_section", lambda card: {})  # the claim's own tests are elsewhere
    head = build.head(ck, "abc", "dp", object())
    assert head["checkpoint"] == {"path": "out/checkpoint", "hash": "abc", "variant": "dp"}


def test_the_pmixed_search_records_the_shown_path(tmp_path, monkeypatch):
    """`dpaudit pmixed search` writes the deployment's path into search.json the same way."""
    import json

    from dpaudit.pmixed import search

    monkeypatch.chdir(tmp_path)
    deployment = tmp_path / "reports" / "pmixed" / "checkpoint"
    deployment.mkdir(parents=True)
    monkeypatch.setattr(search, "render", lambda r: "body\n")  # the search's rendering has its own tests
    search.write({}, tmp_path / "out", deployment.resolve())
    assert json.loads((tmp_path / "out" / "search.json").read_text())["checkpoint"]["path"] == "reports/pmixed/checkpoint"
