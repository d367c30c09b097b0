"""A task's data from wherever the user keeps it, read into rows with the task's named columns.

``source`` (``[task] source``) is one of
* a file: ``.jsonl``, ``.json`` (an array, or JSON Lines), ``.csv``, ``.tsv`` or ``.parquet`` (one split; the task
  splits it with its seed);
* a folder of files ``train.*`` and ``validation.*`` / ``dev.*`` / ``test.*`` (two splits, kept);
* a ``datasets.save_to_disk`` folder: a ``DatasetDict`` (``train`` and ``validation``/``test``/``dev`` kept) or
  one ``Dataset``;
* a Hugging Face hub dataset (``name``, ``org/name``, ``name:config``) where the machine is online; offline
  (``HF_DATASETS_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``) it is refused in one line with that reason.

Every task names its fields (``options.TASK_COLUMNS``: ``text``/``label``; ``table``/``reference``;
``user``/``text``); each is found under the column ``[task.columns]`` maps it to, else under its own name or
one of the task's aliases. A missing column is refused before any row is read further, naming the columns
the data has and the setting that fixes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import DpauditError
from dpaudit.tasks.files import NAMES, SUFFIXES, read_rows

TRAIN_SPLITS = ("train",)
TEST_SPLITS = ("validation", "dev", "test")
OFFLINE_VARS = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@dataclass(frozen=True)
class Rows:
    """The rows of a source, each a dict of the task's field names. ``test`` is None where the source has one
    split (the task splits ``train`` with its seed)."""

    train: list[dict]
    test: list[dict] | None
    kind: str  # file | folder | save_to_disk | hub


def read(source: str, fields: dict[str, tuple[str, ...]], columns: dict | None, what: str) -> Rows:
    """Rows of ``source`` with ``fields`` (field -> accepted column names, its own name first) renamed; ``columns``
    (field -> column) overrides the names looked for; ``what`` names the data in errors."""
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(fields))
    if unknown:
        raise DpauditError(f"task.columns names {', '.join(map(repr, unknown))}, not a field of {what}; "
                           f"its fields are {', '.join(fields)}")
    path = Path(source).expanduser()
    if path.is_file():
        return Rows(_rename(read_rows(path, what, _HINT), fields, columns, str(path)), None, "file")
    if path.is_dir():
        if (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists():
            import datasets

            return _from_datasets(datasets.load_from_disk(str(path)), fields, columns, str(path), "save_to_disk")
        return _from_folder(path, fields, columns)
    if path.suffix in SUFFIXES or source.startswith((".", "/", "~")):
        raise DpauditError(f"{what} {source} not found; {_HINT}")
    return _from_hub(source, fields, columns, what)


_HINT = f"give a {NAMES} file, a folder with train and validation files, a save_to_disk folder or a hub dataset"


def _from_folder(path: Path, fields, columns) -> Rows:
    files: dict[str, Path] = {}
    for f in sorted(path.iterdir()):
        if f.suffix in SUFFIXES and f.is_file():
            if f.stem in files and f.stem in TRAIN_SPLITS + TEST_SPLITS:
                raise DpauditError(f"{path} holds two {f.stem} files ({files[f.stem].name}, {f.name}); keep the one "
                                   "the model was trained on")
            files[f.stem] = f
    tr = next((files[s] for s in TRAIN_SPLITS if s in files), None)
    te = next((files[s] for s in TEST_SPLITS if s in files), None)
    if tr is None or te is None:
        raise DpauditError(f"{path}: expected train.(jsonl|json|csv|tsv|parquet) and a validation, dev or test file "
                           "beside it (or a datasets.save_to_disk folder)")
    return Rows(_rename(read_rows(tr, "data", _HINT), fields, columns, str(tr)),
                _rename(read_rows(te, "data", _HINT), fields, columns, str(te)), "folder")


def _from_datasets(ds, fields, columns, where: str, kind: str) -> Rows:
    import datasets

    if isinstance(ds, datasets.DatasetDict):
        tr = next((s for s in TRAIN_SPLITS if s in ds), None)
        te = next((s for s in TEST_SPLITS if s in ds), None)
        if tr is None:
            if len(ds) != 1:
                raise DpauditError(f"{where}: no 'train' split among {', '.join(ds)}; name one 'train'")
            tr = next(iter(ds))
        return Rows(_rename(ds[tr], fields, columns, f"{where} [{tr}]", ds[tr].column_names),
                    None if te is None else _rename(ds[te], fields, columns, f"{where} [{te}]", ds[te].column_names),
                    kind)
    return Rows(_rename(ds, fields, columns, where, ds.column_names), None, kind)


def offline() -> bool:
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on") for k in OFFLINE_VARS)


def _from_hub(source: str, fields, columns, what: str) -> Rows:
    if offline():
        on = next(k for k in OFFLINE_VARS if os.environ.get(k, "").lower() in ("1", "true", "yes", "on"))
        raise DpauditError(f"{what} {source!r} is not a local file or folder, and reading it from the Hugging Face hub "
                           f"is off ({on}=1); save it with datasets' save_to_disk on a machine online and give the folder")
    import datasets

    name, _, config = source.partition(":")
    try:
        ds = datasets.load_dataset(name, config or None)
    except Exception as e:  # network, unknown name, gated: one line with the reason
        raise DpauditError(f"could not load the hub dataset {source!r}: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''}; check the name (name, org/name or name:config)") from None
    return _from_datasets(ds, fields, columns, source, "hub")


def column_names(have: list) -> str:
    """The data's column names for an error line: at most 6, each cut at 30 characters (a file without a header
    row has a training text where its names should be; the line must not print the data)."""
    if not have:
        return "none"
    shown = [repr(str(h)[:30] + ("..." if len(str(h)) > 30 else "")) for h in have[:6]]
    return ", ".join(shown) + (f" and {len(have) - 6} more" if len(have) > 6 else "")


def _resolve(fields, columns, have: list[str], where: str) -> dict[str, str]:
    out = {}
    for field, names in fields.items():
        if field in columns:
            col = columns[field]
            if col not in have:
                raise DpauditError(f"{where} has no column {col!r} (task.columns.{field}); its columns are "
                                   f"{column_names(have)}")
        else:
            col = next((n for n in names if n in have), None)
            if col is None:
                looked = " or ".join(repr(n) for n in names)
                raise DpauditError(f"{where} has no {field} column (looked for {looked}; its columns are "
                                   f"{column_names(have)}); name it with [task.columns] "
                                   f"{field} = \"...\"")
        out[field] = col
    return out


TEXT_FIELDS = ("text", "table", "reference")  # the fields a model reads as text: a list or a number is refused


def _rename(rows, fields, columns, where: str, have: list[str] | None = None) -> list[dict]:
    """``rows`` (dicts, or a datasets.Dataset) with the task's fields only, under their own names."""
    if len(rows) == 0:
        raise DpauditError(f"{where} is empty (no rows); check the data file")
    if have is None:
        have = list(dict.fromkeys(k for r in rows for k in r))
    mapping = _resolve(fields, columns, have, where)
    out = []
    for i, r in enumerate(rows):
        row = {}
        for field, col in mapping.items():
            v = r.get(col)
            if v is None or (isinstance(v, str) and not v.strip()):
                raise DpauditError(f"{where}: row {i} has no {field} (column {col!r} is empty); fill it or drop the row")
            if field in TEXT_FIELDS and not isinstance(v, str):  # str() of it would train on a Python repr
                raise DpauditError(f"{where}: row {i}'s {field} (column {col!r}) is not text but a {type(v).__name__}; "
                                   "write it out as the text the model should train on (chat messages through "
                                   "your chat template, one reference per row)")
            row[field] = v
        out.append(row)
    return out
