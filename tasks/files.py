"""Reading local data files (JSONL, JSON, CSV, TSV, Parquet) into rows, with one-line errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.io import DuplicateKey, printable, regular_file, repeated, unique_keys

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


SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
NAMES = ".jsonl/.json/.csv/.tsv/.parquet"


def read_rows(path: Path, what: str, hint: str) -> list[dict]:
    """Rows of a data file, by its suffix: ``.jsonl`` (one object per line), ``.json`` (an array of objects, or
    JSON Lines as ``datasets``' ``to_json`` writes them), ``.csv``/``.tsv`` with a header, ``.parquet``. Errors name
    the line, never its content (a training text is private).

    Args:
        path: The file.
        what: What the data is, for the errors.
        hint: What else is accepted, for the errors.

    Returns:
        One dict per record.

    Raises:
        DpauditError: A missing, unreadable or malformed file, in one line.
    """
    path = Path(path)
    regular_file(path, what, hint)
    if path.suffix not in SUFFIXES:
        raise DpauditError(f"{path}: unsupported data file; use {NAMES} ({hint})")
    _fits(path)
    if path.suffix == ".parquet":
        return _parquet(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a leading BOM (Excel, Notepad) is not data
    except UnicodeDecodeError as e:
        raise DpauditError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return _json_array(path, text)
    if path.suffix == ".json" and "\n" in text.strip():
        try:
            whole = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            whole = None  # JSON Lines (several values): read line by line
        if isinstance(whole, dict):
            raise DpauditError(f"{path} holds one JSON object over several lines, not records; a .json data file is "
                               "an array of objects or one object per line (the records under one of its keys: "
                               "save them as such an array)")
    if path.suffix in (".jsonl", ".json"):
        return _json_lines(path, text)
    limit = csv.field_size_limit()
    csv.field_size_limit(MAX_FIELD)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix == ".tsv" else ",")
        twice = repeated(reader.fieldnames or ())
        if twice is not None:  # DictReader would keep the last such column without a word
            raise DpauditError(f"{path}: the header names the column {twice!r} twice; rename or remove one of them")
        return list(reader)
    except csv.Error as e:
        raise DpauditError(f"{path}: not readable as {path.suffix[1:].upper()} ({str(e)[:120]}); fields of at most "
                           f"{MAX_FIELD:,} characters, one record per row") from None
    finally:
        csv.field_size_limit(limit)


def _json_lines(path: Path, text: str) -> list[dict]:
    """The objects of a JSON Lines text, one per non-empty line."""
    rows = []
    for n, line in enumerate(lines(text), 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:  # a record the tokenizer would try to hold whole (a 1 GB line aborted in Rust)
            raise DpauditError(f"{path}: line {n} holds {len(line):,} characters, more than one record may "
                               f"({MAX_LINE:,}); split the document into records")
        try:
            row = json.loads(line, object_pairs_hook=unique_keys)
        except DuplicateKey as e:
            raise DpauditError(f"{path}: line {n} names the key {printable(str(e))!r} twice (which one the record "
                               "holds is a reader's guess); keep one") from None
        except (json.JSONDecodeError, RecursionError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            raise DpauditError(f"{path}: line {n} is not valid JSON ({why}); each line must be one object") from None
        if not isinstance(row, dict):
            raise DpauditError(f"{path}: line {n} is a JSON {_kind(row)}, not an object; each line must be "
                               'one object such as {"text": ..., "label": ...}')
        rows.append(row)
    return rows


def _kind(value) -> str:
    return {type(None): "null", list: "list", str: "string", bool: "boolean", dict: "object"}.get(type(value), "number")


def _json_array(path: Path, text: str) -> list[dict]:
    """The objects of a JSON array (Alpaca-style instruction data, pandas' ``to_json(orient="records")``)."""
    try:
        data = json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey as e:
        raise DpauditError(f"{path}: a record names the key {printable(str(e))!r} twice (which one it holds is a "
                           "reader's guess); keep one") from None
    except (json.JSONDecodeError, RecursionError) as e:
        why = f"{e.msg}, line {e.lineno}" if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        raise DpauditError(f"{path} is not valid JSON ({why}); a .json data file is one array of objects, or one "
                           "object per line") from None
    bad = next((i for i, row in enumerate(data, 1) if not isinstance(row, dict)), None)
    if bad is not None:
        raise DpauditError(f"{path}: item {bad} of the array is a JSON {_kind(data[bad - 1])}, not an object; each "
                           'record must be one object such as {"text": ..., "label": ...}')
    return data


def _parquet(path: Path) -> list[dict]:
    """The rows of a Parquet file (``datasets``' ``to_parquet``, pandas, the hub's own format), through pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DpauditError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow, or dpaudit[train]); or save "
                           "the data as .jsonl or .csv") from None
    try:
        twice = repeated(pq.read_schema(path).names)  # before the table: pyarrow's own read fails on such a file
        rows = None if twice is not None else pq.read_table(path).to_pylist()
    except Exception as e:  # noqa: BLE001 - a damaged or foreign file is bad input
        why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        raise DpauditError(f"{path} is not a readable Parquet file ({why}); save it again with to_parquet") from None
    if twice is not None:  # pyarrow writes such a file; which column a record holds would be a reader's guess
        raise DpauditError(f"{path}: the Parquet file names the column {printable(twice)!r} twice; rename or remove "
                           "one of them")
    return rows


MEMORY_PER_BYTE = 10  # Python's rows (str objects, dicts) of a text file take about this many times its size


def _fits(path: Path) -> None:
    """Refuse, before reading, a file whose rows would not fit in this machine's memory (a file is read whole)."""
    from dpaudit.tasks.model_spec import available_memory

    size, avail = path.stat().st_size, available_memory()
    factor = MEMORY_PER_BYTE * (4 if path.suffix == ".parquet" else 1)  # a compressed column store expands
    if avail and size * factor > avail:
        raise DpauditError(f"{path} is {size / 2**30:.1f} GiB: its rows would need about {size * factor / 2**30:.0f} "
                           f"GiB, more than this machine's {avail / 2**30:.0f} GiB; give a sample of the records, or "
                           "split the data and audit each part")
