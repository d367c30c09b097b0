"""Hostile and careless input to the light commands (account, audit, lmo, pmixed search, canaries new, card,
table): each case exits 2 with one line naming the problem, quickly, and leaves the folder as it was (no
.partial, no output written; test_bad_inputs._expect_refused). The checkpoint-reading commands' cases are in test_bad_inputs.py."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from dpaudit.cli import main
from tests.cli.test_bad_inputs import _expect_refused

ROOT = Path(__file__).resolve().parents[2]
NOISE = '{"a1": 0.3, "a2": 0.2, "a3": 0.5, "gamma_k": 2, "gamma_theta": 0.5, "exp_rate": 5, "u_low": 0.5, "u_high": 1.5}'
MECH = ["--sample-rate", "0.01", "--sigma", "1", "--delta", "1e-5"]
COLS = ["--columns", "variant,accuracy,claimed,best,verdict"]


def _run(w: Path):
    """A copy of the committed demo run folder (reports, cards, manifests, run records; no weights)."""
    shutil.copytree(ROOT / "reports" / "demo", w / "run")
    return w / "run"


def _comparison_in_a_variants_place(w):
    run = _run(w)
    shutil.copy(run / "report.json", run / "dp-eps8" / "report" / "report.json")
    return ["table", run, *COLS]


def _bad_run_json(w):
    run = _run(w)
    (run / "dp-eps8" / "checkpoint" / "run.json").write_text("{bad")
    return ["table", run, *COLS]


def _huge_report(w):
    run = _run(w)
    with open(run / "dp-eps8" / "report" / "report.json", "r+b") as f:  # sparse: 20 GB on no disk
        f.truncate(20 * 2 ** 30)
    return ["table", run, *COLS]


def _auc_ci_empty(w):
    """A variant's report whose AUC interval is empty (the schema wants two ends): the table read it unchecked."""
    run = _run(w)
    f = run / "dp-eps8" / "report" / "report.json"
    d = json.loads(f.read_text())
    d["attacks"]["loss"]["auc_ci"] = []
    f.write_text(json.dumps(d))
    return ["table", run, *COLS]


CASES = [
    ("audit plan with 10^23 canaries", lambda w: ["audit", "plan", *MECH[:4], "--steps", "100", "--canaries", "1" + "0" * 23],
     "at most"),
    ("audit plan with 10^8 canaries", lambda w: ["audit", "plan", *MECH[:4], "--steps", "100", "--canaries", "100000000"],
     "at most"),
    ("audit plan with 2,000 sizes", lambda w: ["audit", "plan", *MECH[:4], "--steps", "100", "--canaries",
                                               ",".join(str(100 * i) for i in range(1, 2001))], "at most 20 sizes"),
    ("audit one-run with 10^8 guesses", lambda w: ["audit", "one-run", "--canaries", "100000000", "--guesses",
                                                   "100000000", "--correct", "60000000"], "guesses"),
    ("account --accountants ','", lambda w: ["account", *MECH, "--steps", "100", "--accountants", ","], "names none"),
    ("account a 401-digit target epsilon", lambda w: ["account", *MECH, "--steps", "100", "--target-epsilon", "9" * 401],
     "target epsilon"),
    ("lmo account at sample rate 2", lambda w: ["lmo", "account", "--noise", NOISE, "--delta", "1e-10", "--steps", "10",
                                                "--sample-rate", "2"], "sample rate"),
    ("lmo account with noise nested 50,000 deep", lambda w: ["lmo", "account", "--noise", "[" * 50000 + "]" * 50000,
                                                             "--delta", "1e-10", "--steps", "10", "--sample-rate", "0.1"],
     "--noise"),
    ("lmo account with a parameter named twice", lambda w: ["lmo", "account", "--noise", NOISE.replace(
        '"a1": 0.3', '"a1": 0.3, "a1": 0.9'), "--delta", "1e-10", "--steps", "10", "--sample-rate", "0.1"],
     "--noise names 'a1' twice"),
    ("pmixed search with 10^9 candidates", lambda w: ["pmixed", "search", w, "--out", w / "s", "--candidates",
                                                      "1000000000"], "--candidates"),
    ("pmixed search with seed -1", lambda w: ["pmixed", "search", w, "--out", w / "s", "--seed", "-1"], "--seed"),
    ("canaries new --force onto a folder", lambda w: (w / "adir").mkdir() or
     ["canaries", "new", "--m", "10", "--out", w / "adir", "--force"], "is a folder"),
    ("card onto a folder", lambda w: (w / "adir").mkdir() or
     ["card", "--epsilon", "1", *MECH[:4], "--delta", "1e-5", "--steps", "100", "--out", w / "adir"], "is a folder"),
    ("table: a comparison report in a variant's place", _comparison_in_a_variants_place, "not a variant's evaluation"),
    ("table: run.json not JSON", _bad_run_json, "not valid JSON"),
    ("table: a 20 GB report.json", _huge_report, "more than any dpaudit file"),
    ("table: a report off its schema", _auc_ci_empty, "does not match the report schema at attacks/loss/auc_ci"),
    ("check a pipe", lambda w: os.mkfifo(w / "r.json") or ["check", w / "r.json"], "is not a regular file"),
    ("check a device", lambda w: ["check", "/dev/null"], "/dev/null is not a regular file"),
    ("compare a pipe", lambda w: os.mkfifo(w / "r.json") or ["compare", w / "r.json", w / "r.json"],
     "is not a regular file"),
    ("audit scores a pipe", lambda w: os.mkfifo(w / "s.json") or ["audit", "scores", w / "s.json"],
     "is not a regular file"),
    # links that point at each other: pathlib's resolve() raised RuntimeError (exit 3) for --out and a checkpoint
    ("evaluate --out through a symlink loop", lambda w: _loop(w) or ["evaluate", w, "--out", w / "la" / "r"],
     "links that point at each other"),
    ("evaluate a checkpoint that is a symlink loop", lambda w: _loop(w) or ["evaluate", w / "la", "--out", w / "r"],
     "links that point at each other"),
    # a folder that takes no new file (a pseudo file system): creating the temporary file was ENOENT, exit 3
    ("card into /proc", lambda w: ["card", "--epsilon", "1", *MECH[:4], "--delta", "1e-5", "--steps", "100", "--out",
                                   "/proc/privacy_card.json"], "cannot create a file in /proc"),
    ("run into /proc", lambda w: ["run", Path(__file__).resolve().parents[2] / "configs" / "tiny.toml", "--out",
                                  "/proc/dpaudit-run"], "cannot create or find /proc/dpaudit-run"),
]


def _loop(w: Path) -> None:
    os.symlink("lb", w / "la")
    os.symlink("la", w / "lb")


@pytest.mark.parametrize("name,argv,needle", CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line_leaving_nothing(name, argv, needle, tmp_path, capsys):
    args = argv(tmp_path)
    _expect_refused(args, needle, tmp_path, capsys)


def test_account_at_the_step_cap_answers_with_the_accountants_that_can(capsys):
    """10^8 steps (the documented cap): PRV's grid would need 455 GiB, so it declines before allocating and the
    others answer; exit 0, never an internal error."""
    assert main(["account", *MECH, "--steps", "100000000", "--accountants", "rdp,prv"]) == 0
    out = capsys.readouterr().out
    assert "rdp      ε = " in out and "prv      not applicable: prv would discretise on" in out


def test_a_variant_named_with_a_newline_and_a_pipe_stays_one_cell(tmp_path, capsys):
    run = _run(tmp_path)
    (run / "dp-eps8").rename(run / "dp\n| injected | row |")
    assert main(["table", str(run), *COLS]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 4 and all(len(re.split(r"(?<!\\)\|", r)) == 7 for r in rows), rows  # 5 cells a row


def test_a_failed_write_leaves_no_partial_file(tmp_path):
    from dpaudit.errors import DpauditError
    from dpaudit.io import write_atomic

    def save(tmp):
        tmp.write_text("half")
        raise OSError("No space left on device")

    with pytest.raises(OSError):
        write_atomic(tmp_path / "c.json", save)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DpauditError, match="is not a folder"):
        write_atomic(tmp_path / "no" / "c.json", lambda t: t.write_text(json.dumps({})))


DATA = [
    ("non-UTF-8 CSV", "d.csv", b"text,label\n\xff\xfe bad,1\ngood,0\n", "not UTF-8"),
    ("non-UTF-8 JSONL", "d.jsonl", b'{"text": "\xff"}\n', "not UTF-8"),
    ("a 200 KB CSV field is read", "d.csv", b"text,label\n" + b"x" * 200_000 + b",1\nok,0\n", None),
    ("a 20 MB CSV field", "d.csv", b"text,label\n" + b"x" * 20_000_000 + b",1\n", "fields of at most"),
    ("a null JSONL line", "d.jsonl", b'{"text": "a", "label": 1}\nnull\n', "line 2 is a JSON null"),
    ("a JSONL of lists", "d.jsonl", b'["private text one", 1]\n["private text two", 0]\n', "line 1 is a JSON list"),
    ("a JSONL line nested 100,000 deep", "d.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1"),
    ("a 30 MB JSONL record", "d.jsonl", b'{"text": "ok", "label": 0}\n{"text": "' + b"x" * 30_000_000 + b'", "label": 1}\n',
     "line 2 holds 30,000,0"),
]


@pytest.mark.parametrize("name,file,content,needle", DATA, ids=[d[0] for d in DATA])
def test_a_data_file_is_read_or_refused_in_one_line_without_its_text(name, file, content, needle, tmp_path):
    from dpaudit.errors import DpauditError
    from dpaudit.tasks.files import read_rows

    f = tmp_path / file
    f.write_bytes(content)
    if needle is None:
        assert len(read_rows(f, "data", "")[0]["text"]) == 200_000
        return
    with pytest.raises(DpauditError, match=needle) as e:
        read_rows(f, "data", "")
    assert "\n" not in str(e.value) and "private text" not in str(e.value) and "xxxxxxxx" not in str(e.value)


def test_column_names_in_an_error_are_cut_short():
    """A file without a header row has a training text where its column names should be: at most 6 names of 30
    characters each reach the error line."""
    from dpaudit.tasks.data_source import column_names

    text = column_names(["a private training sentence that goes on and on"] + [f"c{i}" for i in range(10)])
    assert "goes on and on" not in text and text.endswith("and 5 more") and len(text) < 120


@pytest.mark.parametrize("fail_on", ["manifest", "records"])
def test_canaries_new_on_a_full_disk_leaves_neither_file(fail_on, tmp_path, capsys, monkeypatch):
    """The manifest and its records are written together: a disk that fills up half-way through either leaves no
    manifest without its records (and no .partial), as the error line says (on a real 48 kB tmpfs, too: checked by
    hand on 2026-11-26)."""
    import errno

    from dpaudit.canaries import manifest, planting

    def full(path):
        Path(path).write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    if fail_on == "records":
        real = planting.records_writer
        monkeypatch.setattr(planting, "records_writer", lambda man, column="text": (full, real(man, column)[1]))
    else:
        def no_space(self):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(manifest.Manifest, "json_text", no_space)  # the manifest's write fails
    assert main(["canaries", "new", "--m", "20", "--out", str(tmp_path / "c.json"),
                 "--records", str(tmp_path / "r.jsonl")]) == 2
    assert "nothing partial was kept" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_file_of_another_kind_is_named_for_what_it_is(tmp_path, capsys):
    """A swapped argument (a manifest where a card goes, a card where a report goes) was refused by the first field
    the expected kind lacks ("field 'claim' is missing", "has kind None"): now by what the file is, in one line,
    for every reader of the three kinds (the CLI's and the Python API's)."""
    from dpaudit import api
    from dpaudit.canaries.manifest import load_manifest
    from dpaudit.claim.card import load_card
    from dpaudit.errors import DpauditError

    run = _run(tmp_path)
    card = run / "dp-eps8" / "checkpoint" / "privacy_card.json"
    man = run / "dp-eps8" / "checkpoint" / "canaries.json"
    report = run / "dp-eps8" / "report" / "report.json"
    for argv, needle in ((["check", str(card)], "is a privacy card (privacy_card.json), not a report"),
                         (["check", str(man)], "is a canary manifest (canaries.json), not a report"),
                         (["model-card", str(card), "--to", str(tmp_path / "README.md")], "is a privacy card"),
                         (["compare", str(report), str(man)], "is a canary manifest")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (argv, err)
    for fn, path, needle in ((load_card, man, "not a privacy card"), (load_card, report, "is a report"),
                             (load_manifest, card, "not a canary manifest"), (load_manifest, report, "is a report")):
        with pytest.raises(DpauditError, match=needle):
            fn(path)
    assert load_card(card) and load_manifest(man)  # each kind reads as itself
    with pytest.raises(DpauditError, match="is a privacy card"):
        api.load_manifest(card)


def test_a_pipe_given_for_a_policy_or_data_file_is_named_as_a_pipe(tmp_path, capsys):
    """`--policy <(...)` (a pipe) read "policy ... not found": every reader of a file (JSON, TOML, data) now says
    the path is not a regular file, in one line, without reading it."""
    from dpaudit.errors import DpauditError
    from dpaudit.tasks.files import read_rows

    run = _run(tmp_path)
    fifo = tmp_path / "policy.toml"
    os.mkfifo(fifo)
    capsys.readouterr()
    assert main(["check", str(run / "dp-eps8" / "report" / "report.json"), "--policy", str(fifo)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a regular file (a device, a pipe or a socket" in err, err
    data = tmp_path / "d.jsonl"
    os.mkfifo(data)
    with pytest.raises(DpauditError, match="not a regular file"):
        read_rows(data, "data", "")


@pytest.mark.parametrize("command", ["check", "compare"])
@pytest.mark.parametrize("kind", ["fifo", "fifo with a reader", "device"])
def test_a_summary_page_that_is_not_a_regular_file_is_refused_without_waiting(command, kind, tmp_path, capsys):
    """`--summary FIFO` blocked the command for ever, waiting for a reader (a hostile round by argument,
    2026-12-06): now a pipe, with or without a reader, and a device are refused in one line, exit 2, before any
    work (the option's own check; open_append refuses them again when it appends)."""
    run = _run(tmp_path)
    report = str(run / "dp-eps8" / "report" / "report.json")
    target = Path("/dev/null") if kind == "device" else tmp_path / "summary.md"
    if kind != "device":
        os.mkfifo(target)
    reader = os.open(target, os.O_RDONLY | os.O_NONBLOCK) if kind == "fifo with a reader" else None  # open at once
    try:
        capsys.readouterr()
        argv = [command, report, *([report] if command == "compare" else []), "--summary", str(target)]
        if command == "check":  # refused before any work: the missing checkpoint is never reached
            argv += ["--checkpoint", str(tmp_path / "missing")]
        assert main(argv) == 2
    finally:
        if reader is not None:
            os.close(reader)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("pipe" in err or "not a regular file" in err), err
    assert "missing" not in err, err


def test_a_users_own_report_files_are_never_replaced(tmp_path, capsys):
    """`evaluate --out DIR` replaces the files it writes (report.json, REPORT.md, the plots) and keeps the rest:
    in a folder that is not a dpaudit report's (no report.json of dpaudit's), a user's REPORT.md or roc.png was
    overwritten. Now refused before any work, in one line; a dpaudit report folder is still redone in place."""
    from dpaudit.errors import DpauditError
    from dpaudit.io import REPORT_FILES, check_out

    run = _run(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "REPORT.md").write_text("# my own notes\n")
    (mine / "notes.txt").write_text("kept\n")
    capsys.readouterr()
    assert main(["evaluate", str(run / "dp-eps8" / "checkpoint"), "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds REPORT.md but no report.json of dpaudit's" in err, err
    assert (mine / "REPORT.md").read_text() == "# my own notes\n"
    for name in ("roc.png", "report.json"):
        other = tmp_path / f"other-{name}"
        other.mkdir()
        (other / name).write_text("{}\n")
        with pytest.raises(DpauditError, match=f"holds {name}"):
            check_out(other, outputs=REPORT_FILES)
    from dpaudit import api

    report = json.loads((run / "dp-eps8" / "report" / "report.json").read_text())
    with pytest.raises(DpauditError, match="holds REPORT.md but no report.json of dpaudit's"):
        api.write_report(report, mine)  # the Python API's writer too
    assert (mine / "REPORT.md").read_text() == "# my own notes\n"
    assert api.write_report(report, tmp_path / "fresh") == (tmp_path / "fresh" / "REPORT.md").absolute()
    assert check_out(run / "dp-eps8" / "report", outputs=REPORT_FILES)  # dpaudit's own report folder
    assert check_out(tmp_path / "notes-only", outputs=REPORT_FILES)  # new, or holding none of the names
    # a `dpaudit run` folder holds its comparison (report.json of kind "comparison"): an evaluation's --out there
    # replaced the run's REPORT.md and report.json with one checkpoint's (found 2026-12-06); refused, and the run kept
    before = (run / "report.json").read_bytes()
    assert main(["evaluate", str(run / "dp-eps8" / "checkpoint"), "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "holds a dpaudit comparison report" in err, err
    assert (run / "report.json").read_bytes() == before
    with pytest.raises(DpauditError, match="comparison report"):
        api.write_report(report, run)


def test_a_folder_given_where_a_file_is_written_names_the_file_to_write(tmp_path, capsys):
    """`card --out my-model` and `canaries new --out my-model` (the checkpoint folder, not the file in it): the
    refusal names the file evaluate reads there, and nothing is written."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    for argv, name in ((["card", "--epsilon", "8", "--delta", "1e-5", "--sigma", "0.6", "--sample-rate", "0.01",
                         "--steps", "3000", "--out", str(folder)], "privacy_card.json"),
                       (["canaries", "new", "--m", "20", "--seed", "1", "--out", str(folder)], "canaries.json"),
                       (["canaries", "new", "--m", "20", "--seed", "1", "--out", str(folder / "c.json"), "--records",
                         str(folder)], "canary_records.jsonl")):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"is a folder; name the file to write in it ({folder / name}" in err
    assert list(folder.iterdir()) == []


def test_a_toml_file_saved_with_a_byte_order_mark_reads_as_without_it(tmp_path, capsys):
    """A policy (or run config) saved by Windows Notepad as "UTF-8 with BOM", CRLF line ends: it was "not valid
    TOML: Invalid statement (at line 1, column 1)"; data files already read the same way."""
    run = _run(tmp_path)
    report = str(run / "dp-eps8" / "report" / "report.json")
    plain, bom = tmp_path / "plain.toml", tmp_path / "bom.toml"
    text = '[rules]\r\nrequire_claim = false\r\nallowed_verdicts = ["underpowered", "consistent"]\r\n'
    plain.write_bytes(text.encode())
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    capsys.readouterr()
    assert main(["check", report, "--policy", str(plain)]) == 0
    assert main(["check", report, "--policy", str(bom)]) == 0, capsys.readouterr().err


def test_a_dpaudit_file_naming_a_key_twice_is_refused_by_every_reader(tmp_path, capsys):
    """A card with "epsilon": 8 and "epsilon": 1 in one object says 8 to a reader that keeps the first and 1 to
    Python's json: the gate and a human would read different claims. Every dpaudit file (card, manifest, report,
    run record) is read by dpaudit.io.read_json, which now refuses a key named twice, naming it."""
    run = _run(tmp_path)
    ck = run / "dp-eps8" / "checkpoint"
    report = run / "dp-eps8" / "report" / "report.json"
    cases = ((ck / "privacy_card.json", '"claim": {', '"claim": {"epsilon": 100, ', "epsilon",
              ["account", "--card", str(ck / "privacy_card.json")]),
             (report, '"verdict": {', '"verdict": {"status": "violated", ', "status", ["check", str(report)]),
             (ck / "canaries.json", '"canaries": [', '"canaries": [], "canaries": [', "canaries",
              ["evaluate", str(ck), "--out", str(tmp_path / "r")]))
    for path, anchor, doubled, key, argv in cases:
        text = path.read_text()
        assert anchor in text, (path, anchor)
        path.write_text(text.replace(anchor, doubled, 1))
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"names the key '{key}' twice" in err, (argv, err)
        path.write_text(text)


def test_every_seed_option_refuses_a_negative_seed_before_any_work():
    """`audit split --seed -1` reached NumPy's generator and ended in an internal error (exit 3; a hostile round by
    argument, 2026-12-06): every command's --seed is now a non-negative integer range, refused by the parser in
    one line. The command tree is walked, so a new command's --seed is held to it too."""
    import click

    from dpaudit.cli.main import cli

    def walk(c, path=()):
        if isinstance(c, click.Group):
            for name, sub in c.commands.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, c

    seeds = [(path, p) for path, c in walk(cli) for p in c.params if p.name == "seed"]
    assert len(seeds) >= 8, seeds
    for path, p in seeds:
        assert isinstance(p.type, click.IntRange) and p.type.min == 0, (" ".join(path), p.type)


def test_append_never_waits_on_a_pipe(tmp_path):
    """dpaudit.io.open_append (the job summary, PMixED's transcript and lock) opens without blocking and keeps
    regular files only: a FIFO that appears after the option was checked is still refused, reader or not."""
    from dpaudit.errors import DpauditError
    from dpaudit.io import open_append

    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(DpauditError, match="it is a pipe"):
        open_append(fifo, "job summary")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(DpauditError, match="not a regular file"):
            open_append(fifo, "job summary")
    finally:
        os.close(reader)
    with open_append(tmp_path / "s.md", "job summary") as f:
        f.write("x\n")
    assert (tmp_path / "s.md").read_text() == "x\n"
