"""One writer (docs/security.md, "One writer"): every file dpaudit writes goes through ``dpaudit.io.write_atomic``
(one file) or ``dpaudit.folders`` (a folder of files). Planted symlinks are never written through and never read
into an output; permissions are kept; read-only files are refused. A table drives every writing command of the
CLI, and a test walks the command tree so a new command with an output path cannot skip the table."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import click
import pytest

from dpaudit.cli import main
from dpaudit.errors import DpauditError
from dpaudit.io import write_atomic, write_text

pytestmark = pytest.mark.filterwarnings("ignore")

VICTIM_TEXT = "a file the user owns: dpaudit must never write it\n"
CARD_ARGS = ["card", "--epsilon", "8", "--delta", "1e-5", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100"]


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "elsewhere" / "victim.txt"
    v.parent.mkdir()
    v.write_text(VICTIM_TEXT)
    return v


def _untouched(victim: Path) -> None:
    assert victim.read_text() == VICTIM_TEXT


# ---------------------------------------------------------------- the function itself
def test_a_symlinked_target_is_refused_and_its_target_untouched(tmp_path, victim):
    link = tmp_path / "README.md"
    link.symlink_to(victim)
    with pytest.raises(DpauditError, match="symlink"):
        write_text(link, "x")
    _untouched(victim)
    assert link.is_symlink()


def test_links_planted_at_every_name_the_old_writer_used_are_not_followed(tmp_path, victim):
    """The temporary file is created exclusively under an unpredictable name: links at ``X.partial`` (the old
    fixed name) or ``X.<pid>.tmp`` catch nothing."""
    target = tmp_path / "card.json"
    for name in ("card.json.partial", f"card.json.{os.getpid()}.tmp", ".card.json.partial"):
        (tmp_path / name).symlink_to(victim)
    write_text(target, "{}\n")
    assert target.read_text() == "{}\n" and not target.is_symlink()
    _untouched(victim)
    leftovers = {p.name for p in tmp_path.iterdir()} - {"card.json", "elsewhere", "card.json.partial",
                                                        f"card.json.{os.getpid()}.tmp", ".card.json.partial"}
    assert not leftovers


def test_permissions_are_kept_and_new_files_get_the_default(tmp_path):
    kept = tmp_path / "kept.md"
    kept.write_text("old")
    kept.chmod(0o640)
    write_text(kept, "new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new"
    mask = os.umask(0)
    os.umask(mask)
    fresh = tmp_path / "fresh.md"
    write_text(fresh, "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~mask  # not mkstemp's private 0o600


def test_folders_come_out_readable_like_ordinary_writes(tmp_path):
    """safetensors (0.8.1 on) saves every file 0o600 and mkdtemp makes a stage 0o700: a checkpoint came out
    readable by its writer alone (a colleague, a serving container's user got "permission denied")."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from dpaudit.folders import atomic_folder, staged_folder

    mask = os.umask(0)
    os.umask(mask)
    with staged_folder(tmp_path / "ckpt") as stage:
        (stage / "model").mkdir()
        save_file({"w": torch.zeros(2)}, str(stage / "model" / "model.safetensors"))
    assert stat.S_IMODE((tmp_path / "ckpt" / "model" / "model.safetensors").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "ckpt").stat().st_mode) == 0o777 & ~mask
    kept = tmp_path / "ckpt" / "report.json"
    kept.write_text("{}")
    kept.chmod(0o640)
    with atomic_folder(tmp_path / "ckpt") as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "scores.safetensors"))
        (tmp / "report.json").write_text("{}")
    assert stat.S_IMODE((tmp_path / "ckpt" / "scores.safetensors").stat().st_mode) == 0o666 & ~mask
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640  # a replaced file keeps its permissions


def test_a_read_only_file_is_refused_not_replaced(tmp_path):
    ro = tmp_path / "README.md"
    ro.write_text("keep")
    ro.chmod(0o444)
    try:
        with pytest.raises(DpauditError, match="read-only"):
            write_text(ro, "x")
        assert ro.read_text() == "keep" and stat.S_IMODE(ro.stat().st_mode) == 0o444
    finally:
        ro.chmod(0o644)


def test_a_failed_save_leaves_nothing(tmp_path):
    def boom(tmp):
        Path(tmp).write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_atomic(tmp_path / "x.json", boom)
    assert list(tmp_path.iterdir()) == []


def test_the_folder_writers_replace_links_and_never_write_through(tmp_path, victim):
    from dpaudit.folders import atomic_folder, staged_folder

    out = tmp_path / "report"
    out.mkdir()
    (out / "report.json").symlink_to(victim)
    with atomic_folder(out) as tmp:
        (tmp / "report.json").write_text("{}")
    assert not (out / "report.json").is_symlink() and (out / "report.json").read_text() == "{}"
    _untouched(victim)
    dest = tmp_path / "deployment"
    dest.symlink_to(victim.parent, target_is_directory=True)
    with staged_folder(dest) as stage:
        (stage / "x.json").write_text("{}")
    assert not dest.is_symlink() and (dest / "x.json").is_file()
    _untouched(victim)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


# ---------------------------------------------------------------- every writing command, with links planted
@pytest.fixture(scope="module")
def audited(tmp_path_factory, tiny_model_factory):
    """A tiny checkpoint with a card and canaries, and its report: the inputs of the commands that read before
    they write."""
    from dpaudit import checkpoint
    from dpaudit.accounting.events import SubsampledGaussian
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.claim.card import Claim, PrivacyCard

    d = tmp_path_factory.mktemp("audited")
    model, tok = tiny_model_factory()
    card = PrivacyCard(claim=Claim(epsilon=8.0, delta=1e-5), clipping_norm=1.0, expected_batch_size=10,
                       dataset_size=100, method="dp_adam",
                       events=[SubsampledGaussian(sample_rate=0.1, noise_multiplier=1.0, steps=100)])
    ck = checkpoint.write(d / "ck", model, tok, card, generate(CanaryPlan(m=20, length=4)), {})
    assert main(["evaluate", str(ck), "--out", str(d / "report"), "--attacks", "loss", "--quiet"]) == 0
    (d / "train.jsonl").write_text("".join(json.dumps({"text": f"ticket {i} is open"}) + "\n" for i in range(40)))
    return d


def _card(w, a, out):
    return [*CARD_ARGS, "--out", str(out)]


def _canaries(w, a, out):
    return ["canaries", "new", "--m", "20", "--out", str(out), "--force"]  # --force: past the "exists" refusal


def _canary_records(w, a, out):
    return ["canaries", "new", "--m", "20", "--out", str(w / "canaries.json"), "--records", str(out), "--force"]


def _model_card(w, a, out):
    return ["model-card", str(a / "report" / "report.json"), "--to", str(out)]


def _shipped_report(w, a, out):
    return ["model-card", str(a / "report" / "report.json"), "--to", str(out.parent / "README.md"), "--ship-report"]


def _check_summary(w, a, out):
    return ["check", str(a / "report" / "report.json"), "--summary", str(out)]


def _compare_summary(w, a, out):
    report = str(a / "report" / "report.json")
    return ["compare", report, report, "--summary", str(out)]


# (command, argv builder, file name that is planted as a link): a file the command writes directly
FILE_WRITERS = [
    ("card", _card, "privacy_card.json"),
    ("canaries new", _canaries, "canaries.json"),
    ("canaries new", _canary_records, "canary_records.jsonl"),
    ("model-card", _model_card, "README.md"),
    ("model-card --ship-report", _shipped_report, "dpaudit_report.json"),
    ("check --summary", _check_summary, "summary.md"),
    ("compare --summary", _compare_summary, "summary.md"),
]


@pytest.mark.parametrize("command,argv,name", FILE_WRITERS, ids=[f"{c}:{n}" for c, _, n in FILE_WRITERS])
def test_a_command_refuses_to_write_through_a_planted_link(command, argv, name, audited, tmp_path, victim, capsys):
    link = tmp_path / name
    link.symlink_to(victim)
    assert main(argv(tmp_path, audited, link)) == 2
    err = capsys.readouterr().err.strip()
    assert "symlink" in err and len(err.splitlines()) == 1, err
    _untouched(victim)
    assert link.is_symlink()


def test_the_model_card_never_copies_a_linked_files_text(audited, tmp_path, capsys):
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    (tmp_path / "README.md").symlink_to(secret)
    assert main(["model-card", str(audited / "report" / "report.json"), "--to", str(tmp_path / "README.md")]) == 2
    assert secret.read_text() == "root:x:0:0\n"
    assert not [p for p in tmp_path.iterdir() if "root:x" in (p.read_text() if p.is_file() and not p.is_symlink()
                                                               else "")][1:]


# (command, argv builder for an existing --out folder): folder writers, a link planted under an output's name
def _evaluate(a, out):
    return ["evaluate", str(a / "ck"), "--out", str(out), "--attacks", "loss", "--quiet"]


def _identifiers(a, out):
    return ["audit", "identifiers", str(a / "ck" / "model"), "--training-data", str(a / "train.jsonl"),
            "--format", "uuid4", "--out", str(out), "--quiet"]


FOLDER_WRITERS = [("evaluate", _evaluate, "report.json"), ("evaluate", _evaluate, "REPORT.md"),
                  ("audit identifiers", _identifiers, "report.json")]


@pytest.mark.parametrize("command,argv,name", FOLDER_WRITERS, ids=[f"{c}:{n}" for c, _, n in FOLDER_WRITERS])
def test_a_folder_command_replaces_a_planted_link_and_never_writes_through(command, argv, name, audited, tmp_path,
                                                                           victim):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    code = main(argv(audited, out))
    _untouched(victim)
    assert code in (0, 1, 2)
    if code != 2:  # written: the link was replaced by the output itself
        assert not (out / name).is_symlink() and (out / name).is_file()


def test_run_refuses_an_out_that_is_a_link_to_someone_elses_folder(tmp_path, victim, capsys):
    from tests.settings import TINY_RUN

    cfg = tmp_path / "cfg.toml"
    cfg.write_text(TINY_RUN)
    out = tmp_path / "out"
    out.symlink_to(victim.parent, target_is_directory=True)
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    assert "holds" in capsys.readouterr().err
    _untouched(victim)
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


# The writing commands: every command with an output-path option is in this map, with the test that plants links
# for it. `run`, `pmixed search`: their folders are written by dpaudit.folders (staged_folder, atomic_folder),
# whose link handling is tested above; `run` refuses a linked folder that is not its own before training.
COVERED = {
    ("card", "out"): "FILE_WRITERS",
    ("canaries new", "out"): "FILE_WRITERS",
    ("canaries new", "records"): "FILE_WRITERS",
    ("model-card", "card"): "FILE_WRITERS",
    ("check", "summary_md"): "FILE_WRITERS (appended through dpaudit.io.open_append)",
    ("compare", "summary_md"): "FILE_WRITERS (appended through dpaudit.io.open_append)",
    ("evaluate", "out"): "FOLDER_WRITERS",
    ("audit identifiers", "out"): "FOLDER_WRITERS",
    ("audit split", "out"): "audit identifiers' writer (evaluation/posthoc.py: one write for both)",
    ("run", "out"): "test_run_refuses_an_out_that_is_a_link_to_someone_elses_folder + the folder writers",
    ("pmixed search", "out"): "test_the_folder_writers_replace_links_and_never_write_through (staged_folder)",
}
# Every other path the CLI takes is read, never written; a new path parameter must be put in one of the two maps,
# so an output cannot slip past the table by its option's name (--summary did, before this list).
INPUTS = {
    ("run", "config_path"), ("evaluate", "checkpoint"), ("evaluate", "reference_model"), ("evaluate", "base_model"),
    ("evaluate", "merge_parts"), ("check", "report_json"), ("check", "policy"), ("check", "ckpt"),
    ("account", "card"), ("card", "probe_records"), ("audit scores", "scores_file"),
    ("audit checkpoints", "checkpoints"), ("audit identifiers", "checkpoint"), ("audit identifiers", "training_data"),
    ("audit split", "checkpoint"), ("audit split", "members"), ("audit split", "non_members"),
    ("pmixed generate", "deployment"), ("pmixed budget", "deployment"), ("pmixed search", "deployment"),
    ("compare", "old_json"), ("compare", "new_json"), ("table", "run_dirs"), ("model-card", "report_json"),
    ("canaries new", "base_model"), ("canaries new", "tokenizer_dir"), ("assets", "wordnet_source"),
}


def _commands(group: click.Group, prefix: str = ""):
    for name, cmd in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, full + " ")
        else:
            yield full, cmd


def test_every_command_with_an_output_path_is_covered():
    """Every path parameter of every command is either read (INPUTS) or written and planted with links (COVERED)."""
    from dpaudit.cli.main import cli

    found = {(name, p.name) for name, cmd in _commands(cli) for p in cmd.params if isinstance(p.type, click.Path)}
    assert not set(COVERED) & INPUTS
    assert found == set(COVERED) | INPUTS, (sorted(found - set(COVERED) - INPUTS), sorted((set(COVERED) | INPUTS) - found))


def test_no_module_writes_a_file_except_through_the_writers():
    """Outside the writers and the folders they stage into, no module opens a file for writing by name: a new
    writer that skips them fails here."""

    root = Path(__file__).resolve().parents[2]
    allowed = {"dpaudit/io.py", "dpaudit/folders.py"}
    bad = []
    pattern = re.compile(r"""\.write_(text|bytes)\(|open\([^)]*["'][wax]b?["']|os\.O_CREAT""")
    for p in sorted((root / "dpaudit").rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel in allowed:
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if pattern.search(line) and not _inside_a_writer(line):
                bad.append(f"{rel}:{i}: {line.strip()}")
    assert not bad, "\n".join(bad)


def _inside_a_writer(line: str) -> bool:
    """A write into a fresh stage (``tmp``/``stage``: made by dpaudit.folders or write_atomic) or a lock opened
    with O_NOFOLLOW."""
    return bool(re.search(r"\b(tmp|stage)\b", line)) or "O_NOFOLLOW" in line



def test_a_report_written_over_another_leaves_none_of_the_others_plots(tmp_path):
    """`evaluate A --out r` then `evaluate B --out r`: B's report replaced A's, but A's clipping.png (B had no probe)
    stayed beside it, a plot of another model's training in B's folder. A user's own file there is kept."""
    pytest.importorskip("matplotlib")
    from dpaudit.report.write import write

    report = json.loads((Path(__file__).resolve().parents[2] / "reports/demo/non-private/report/report.json")
                        .read_text())
    out = tmp_path / "r"
    out.mkdir()
    (out / "clipping.png").write_bytes(b"another model's plot")
    (out / "notes.txt").write_text("mine")
    write(report, out)
    names = {p.name for p in out.iterdir()}
    assert "clipping.png" not in names and {"report.json", "REPORT.md", "notes.txt"} <= names
    assert all((out / n).is_file() for n in names if n.endswith(".png"))


def test_two_reports_committed_at_once_never_mix_their_files(tmp_path):
    """Two evaluations into one --out: each report's files replace the other's whole (the second waits for the
    first's lock on the folder), never report.json of one beside REPORT.md of the other."""
    import threading

    from dpaudit.folders import _held, atomic_folder
    from dpaudit.io import REPORT_FILES

    out = tmp_path / "r"
    out.mkdir()
    for name in ("report.json", "REPORT.md"):
        (out / name).write_text("old")
    with _held(out):  # the first writer is moving its files in
        done = []

        def second():
            with atomic_folder(out, owned=REPORT_FILES) as tmp:
                for name in ("report.json", "REPORT.md"):
                    (tmp / name).write_text("second")
            done.append(True)

        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert t.is_alive() and {(out / n).read_text() for n in ("report.json", "REPORT.md")} == {"old"}
    t.join(10)
    assert done and {(out / n).read_text() for n in ("report.json", "REPORT.md")} == {"second"}
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_a_folder_made_by_another_writer_meanwhile_is_merged_into(tmp_path, monkeypatch):
    """The target did not exist when the stage was made and another writer made it meanwhile: the rename of a
    folder onto a non-empty one fails (ENOTEMPTY, exit 3 before); the files are moved in instead."""
    from dpaudit.folders import atomic_folder
    from dpaudit.io import REPORT_FILES

    out = tmp_path / "r"
    real_replace = os.replace

    def racing(src, dst):  # the other writer wins the race between the check and the rename
        if Path(dst) == out and not out.exists():
            out.mkdir()
            (out / "report.json").write_text("theirs")
            (out / "notes.txt").write_text("kept")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", racing)
    with atomic_folder(out, owned=REPORT_FILES) as tmp:
        (tmp / "report.json").write_text("mine")
    assert (out / "report.json").read_text() == "mine" and (out / "notes.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


@pytest.mark.parametrize("replace", [True, False])
def test_a_whole_folder_another_writer_made_meanwhile_is_replaced_or_kept(tmp_path, monkeypatch, replace):
    """A checkpoint (replace=True: the last writer wins) or a cache (replace=False: the first one filled stays) that
    another process made between the removal of the old one and the rename: the rename onto it failed (ENOTEMPTY,
    exit 3) and left the stage behind."""
    from dpaudit.folders import staged_folder

    dest = tmp_path / "ck"
    real_replace = os.replace
    raced = []

    def racing(src, dst):
        if Path(dst) == dest and not raced:
            raced.append(True)
            dest.mkdir()
            (dest / "theirs.json").write_text("{}")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", racing)
    with staged_folder(dest, replace=replace) as stage:
        (stage / "mine.json").write_text("{}")
    assert sorted(p.name for p in dest.iterdir()) == (["mine.json"] if replace else ["theirs.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]  # no stage left behind
