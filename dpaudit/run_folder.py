"""The folder ``dpaudit run`` writes, read and written through one module (docs/architecture.md, Layout)::

    OUT/REPORT.md, OUT/report.json           the comparison
    OUT/<variant>/checkpoint/                 the checkpoint dir (or a PMixED deployment)
    OUT/<variant>/report/                     that variant's REPORT.md, report.json and plots
    OUT/<variant>/train_state/                while it trains: the latest snapshot (trainers/snapshot.py)

    run = RunFolder("reports/demo")
    for name in run.variants():              # those with a report, in name order
        r = run.report(name)                  # report.json as a dict
        rec = run.run_record(name)            # checkpoint/run.json ({} when absent)

No torch here: the table command and the report scripts read committed runs without loading a model.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import DpauditError

CHECKPOINT, REPORT, TRAIN_STATE = "checkpoint", "report", "train_state"
MARKER = ".dpaudit-run"  # dpaudit's own mark on a run folder, written before the first variant trains


@dataclass(frozen=True)
class RunFolder:
    path: Path

    def __init__(self, path):
        object.__setattr__(self, "path", Path(path))

    def checkpoint(self, variant: str) -> Path:
        return self.path / variant / CHECKPOINT

    def report_dir(self, variant: str) -> Path:
        return self.path / variant / REPORT

    def train_state(self, variant: str) -> Path:
        return self.path / variant / TRAIN_STATE

    def has_report(self, variant: str) -> bool:
        return (self.report_dir(variant) / "report.json").is_file()

    def holds_a_run(self) -> bool:
        """Whether the folder is one ``dpaudit run`` made (an earlier or interrupted run, which ``run`` may redo or
        resume): it carries dpaudit's marker (:data:`MARKER`, a regular file, not a link), or, for a run made before
        markers, a whole comparison (report.json of kind "comparison" with a report for each of its variants).
        A folder that merely looks like a run (a sub-folder named checkpoint/) is not one."""
        from dpaudit.io import read_json

        mark = self.path / MARKER
        if mark.is_file() and not mark.is_symlink():
            try:
                d = read_json(mark, "run marker", "")
            except DpauditError:
                d = None
            if isinstance(d, dict) and d.get("kind") == "dpaudit run":
                return True
        top = self.path / "report.json"
        if top.is_file() and not top.is_symlink():
            try:
                d = read_json(top, "report", "")
            except DpauditError:
                d = None
            if isinstance(d, dict) and d.get("kind") == "comparison" and isinstance(d.get("variants"), dict):
                return bool(d["variants"]) and all(isinstance(v, str) and "/" not in v and self.has_report(v)
                                                   for v in d["variants"])
        return False

    def mark(self) -> None:
        """Write dpaudit's marker (through the one writer) into a folder ``run`` is about to fill."""
        import json

        from dpaudit.io import write_text

        if not (self.path / MARKER).is_file():
            write_text(self.path / MARKER, json.dumps({"kind": "dpaudit run", "schema_version": 1}) + "\n")

    @contextlib.contextmanager
    def held(self):
        """Hold the folder for one ``dpaudit run`` while it trains and writes: an exclusive ``flock`` on the folder
        itself (no lock file: the kernel drops it when the process ends, even by SIGKILL, so nothing stale is left). A
        second run into the same ``--out`` meanwhile is refused in one line instead of interleaving its variants
        with the first's. Where the platform has no ``flock`` the folder is not held."""
        from dpaudit.folders import held
        from dpaudit.io import printable

        with held(self.path, 0, f"another `dpaudit run` is writing into {printable(self.path)} (it holds the "
                                "folder); wait for it to finish, or choose another --out"):
            yield

    def variants(self) -> list[str]:
        """The variants with a report, in name order."""
        if not self.path.is_dir():
            raise DpauditError(f"{self.path} is not the folder of a `dpaudit run`; pass the --out of a run")
        return sorted(p.name for p in self.path.iterdir() if p.is_dir() and self.has_report(p.name))

    def report(self, variant: str) -> dict:
        """``<variant>/report/report.json`` (refused with a one-line error when it is missing or not JSON)."""
        from dpaudit.io import read_json

        f = self.report_dir(variant) / "report.json"
        d = read_json(f, "report", f"run the variant first (dpaudit run CONFIG --out {self.path} --variant {variant})")
        if not isinstance(d, dict) or d.get("kind") != "evaluation":
            kind = d.get("kind") if isinstance(d, dict) else type(d).__name__
            raise DpauditError(f"{f} is not a variant's evaluation report (kind {str(kind)[:40]!r}); restore the report "
                               f"`dpaudit evaluate` wrote there, or re-run the variant")
        from dpaudit import report_file

        report_file.check(d, f)  # the schema every command reads a report.json against
        return d

    def run_record(self, variant: str) -> dict:
        """``<variant>/checkpoint/run.json``, or {} for a checkpoint without one."""
        return read_run_record(self.checkpoint(variant) / "run.json")

    def card(self, variant: str) -> dict:
        """``<variant>/checkpoint/privacy_card.json`` as written (a dict), or {} without one."""
        return self._optional(self.checkpoint(variant) / "privacy_card.json", "privacy card")

    @staticmethod
    def _optional(f: Path, what: str) -> dict:
        from dpaudit.io import read_json

        if not f.is_file():
            return {}
        d = read_json(f, what, "")
        if not isinstance(d, dict):
            raise DpauditError(f"{what} {f} is not a JSON object; restore the file the run wrote")
        return d


def from_argv(description: str, default: Path, argv=None) -> RunFolder:
    """The run folder a report script reads: its one optional argument RUN (the --out of a `dpaudit run`), else
    ``default``."""
    import argparse

    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", nargs="?", type=Path, default=None, metavar="RUN",
                    help=f"the --out folder of a dpaudit run (default: {default})")
    return RunFolder(ap.parse_args(argv).run or default)


def read_run_record(f: Path) -> dict:
    """The run record ``f`` (run.json), {} when there is none; the keys dpaudit reads each of its type
    (dpaudit/schemas/run.schema.json), else one line naming the first that is not. Every reader of a run.json
    (``evaluate``, ``table``, the PMixED commands) reads it here."""
    import json

    import jsonschema

    from dpaudit.checks import schema_validator
    from dpaudit.io import read_json

    if not Path(f).exists():
        return {}
    run = read_json(Path(f), "run record", "")
    fix = "restore the run.json the trainer wrote, or remove it (a checkpoint from another tool needs none)"
    if not isinstance(run, dict):
        raise DpauditError(f"{f}: a run record is a JSON object, not a {type(run).__name__}; {fix}")
    if not _RUN_VALIDATOR:
        schema = json.loads((Path(__file__).parent / "schemas" / "run.schema.json").read_text())
        _RUN_VALIDATOR.append(schema_validator(schema))
    err = jsonschema.exceptions.best_match(_RUN_VALIDATOR[0].iter_errors(run))
    if err is not None:
        at = "/".join(str(x) for x in err.absolute_path) or "(top level)"
        raise DpauditError(f"{f}: the run record does not match its schema at {at}: {err.message[:160]}; {fix}")
    return run


_RUN_VALIDATOR: list = []
