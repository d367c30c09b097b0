"""Reading local data files (JSONL, CSV, TSV) into rows, with one-line errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dpaudit.errors import DpauditError


def read_rows(path: Path, what: str, hint: str) -> list[dict]:
    """Rows of a .jsonl/.csv/.tsv file; ``what`` names the data, ``hint`` says what else is accepted."""
    path = Path(path)
    if not path.is_file():
        raise DpauditError(f"{what} {path} not found; {hint}")
    if path.suffix == ".jsonl":
        try:
            return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise DpauditError(f"{path}: invalid JSON line ({e.msg}); each line must be one object") from None
    if path.suffix in (".csv", ".tsv"):
        with path.open(newline="") as f:
            return list(csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ","))
    raise DpauditError(f"{path}: unsupported data file; use .jsonl, .csv or .tsv ({hint})")
