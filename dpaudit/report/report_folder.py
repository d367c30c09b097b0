"""``dpaudit table`` over the reports of ``dpaudit evaluate`` (checkpoints trained anywhere), not only runs.

A team that audited several checkpoints of its own stack (``dpaudit evaluate CKPT --out DIR`` for each) has
report folders, not the ``--out`` of a ``dpaudit run``: :class:`ReportFolder` gives one of them the interface
the table reads from a :class:`dpaudit.run_folder.RunFolder` — one variant, named by the report's variant
(a run's) or after the folder; its
report.json; and the run.json and privacy_card.json of the checkpoint the report names, where that folder is
still there (else {}, and the columns that need them say so in one line).
"""

from __future__ import annotations

from pathlib import Path

from dpaudit.errors import DpauditError


class ReportFolder:
    """The folder of one evaluation report (``evaluate --out``), read as a run of one variant."""

    def __init__(self, path):
        path = Path(path)
        self.path = path.parent if path.name == "report.json" else path
        variant = (self.report("").get("checkpoint") or {}).get("variant")  # a run variant's report: its name
        self.name = variant if isinstance(variant, str) and variant else (self.path.name or str(self.path))

    @staticmethod
    def holds_one(path) -> bool:
        """Whether ``path`` is an evaluation report's folder (or its report.json) rather than a run's --out.

        Args:
            path: What the user passed to ``dpaudit table``.

        Returns:
            True where a report.json of kind ``evaluation`` lies at ``path`` (or is ``path``).
        """
        from dpaudit.io import read_json

        path = Path(path)
        f = path if path.name == "report.json" else path / "report.json"
        if not f.is_file():
            return False
        try:
            d = read_json(f, "report", "")
        except DpauditError:
            return False
        return isinstance(d, dict) and d.get("kind") == "evaluation"

    def variants(self) -> list[str]:
        return [self.name]

    def has_report(self, variant: str) -> bool:
        return variant == self.name

    def report(self, variant: str) -> dict:
        from dpaudit.report_file import load

        return load(self.path / "report.json")

    def _checkpoint(self) -> Path | None:
        """The checkpoint folder the report names, where it still exists (a report made in another place names a
        path that may not)."""
        ck = (self.report(self.name).get("checkpoint") or {}).get("path")
        named = [Path(ck) if Path(ck).is_absolute() else Path.cwd() / ck] if isinstance(ck, str) and ck else []
        for p in [*named, self.path.parent / "checkpoint"]:  # as recorded, else a run variant's sibling checkpoint/
            if (p / "privacy_card.json").is_file():
                return p
        return None

    def run_record(self, variant: str) -> dict:
        from dpaudit.run_folder import read_run_record

        ck = self._checkpoint()
        return read_run_record(ck / "run.json") if ck is not None else {}

    def card(self, variant: str) -> dict:
        from dpaudit.run_folder import RunFolder

        ck = self._checkpoint()
        return RunFolder._optional(ck / "privacy_card.json", "privacy card") if ck is not None else {}
