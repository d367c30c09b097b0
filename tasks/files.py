"""Reading local data files (JSONL, CSV, TSV) into rows, with one-line errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from dpaudit.errors import DpauditError

MAX_FIELD = 10 * 2 ** 20  # characters of one CSV field (csv's default is 128 KiB; a long document fits)
MAX_LINE = 2 * MAX_FIELD  # characters of one JSONL line (a record's fields and their JSON escapes)


def lines(text: str) -> list[str]:
    """The lines of a JSONL or text file: split at ``\n`` only (a ``\r`` before it dropped), never at the other
    breaks ``str.splitlines`` knows (U+2028, U+2029, NEL, form feed), which JSON strings written with
    ``ensure_ascii=False`` (pandas, most scrapers) hold raw inside one record.

    Args:
        text: The file's decoded text.

    Returns:
        Its lines, without their line ends (no empty last line for a final ``\n``).
    """
    out = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    return out[:-1] if out and out[-1] == "" else out


def read_rows(path: Path, what: str, hint: str) -> list[dict]:
    """Rows of a .jsonl/.csv/.tsv file; ``what`` names the data, ``hint`` says what else is accepted. Errors name
    the line, never its content (a training text is private)."""
    path = Path(path)
    if not path.is_file():
        raise DpauditError(f"{what} {path} not found; {hint}")
    if path.suffix not in (".jsonl", ".csv", ".tsv"):
        raise DpauditError(f"{path}: unsupported data file; use .jsonl, .csv or .tsv ({hint})")
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading BOM (Excel, Notepad) is not data
    except UnicodeDecodeError as e:
        raise DpauditError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    if path.suffix == ".jsonl":
        rows = []
        for n, line in enumerate(lines(text), 1):
            if not line.strip():
                continue
            if len(line) > MAX_LINE:  # a record the tokenizer would try to hold whole (a 1 GB line aborted in Rust)
                raise DpauditError(f"{path}: line {n} holds {len(line):,} characters, more than one record may "
                                   f"({MAX_LINE:,}); split the document into records")
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as e:
                why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
                raise DpauditError(f"{path}: line {n} is not valid JSON ({why}); each line must be one object") \
                    from None
            if not isinstance(row, dict):
                kind = {type(None): "null", list: "list", str: "string", bool: "boolean"}.get(type(row), "number")
                raise DpauditError(f"{path}: line {n} is a JSON {kind}, not an object; each line must be "
                                   'one object such as {"text": ..., "label": ...}')
            rows.append(row)
        return rows
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD)
    try:
        return list(csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix == ".tsv" else ","))
    except csv.Error as e:
        raise DpauditError(f"{path}: not readable as {path.suffix[1:].upper()} ({str(e)[:120]}); fields of at most "
                           f"{MAX_FIELD:,} characters, one record per row") from None
    finally:
        csv.field_size_limit(limit)
