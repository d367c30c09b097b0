"""Insert a manifest's canaries into someone else's training data (a ``datasets.Dataset`` or a JSONL file).

The canaries must be in the data the trainer samples from, shuffled in with the rest, each inserted canary
``repetitions`` times; held-out canaries must not be there at all (the audit compares the two). These
helpers do exactly that and nothing else, so that a team with its own training loop never hand-writes it.
"""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit import checks
from dpaudit.canaries.manifest import Manifest, as_manifest
from dpaudit.errors import DpauditError, first_line
from dpaudit.io import write_atomic


def insert_canaries(dataset, manifest: Manifest, column: str = "text", fill: dict | None = None,
                    label_column: str | None = None, seed: int = 0):
    """``dataset`` with the manifest's inserted canaries added and the whole shuffled.

    Args:
        dataset: A ``datasets.Dataset`` of training records (not changed).
        manifest: The canaries' :class:`Manifest`; only the ones its coins inserted are added, each
            ``repetitions`` times.
        column: The text column the canaries go into.
        fill: A value for every other column of ``dataset`` in the canary rows ({column: value}).
        label_column: Where classifier canaries put their label.
        seed: The shuffle's seed.

    Returns:
        A new ``datasets.Dataset``.

    Raises:
        DpauditError: Not a ``datasets.Dataset``; ``column`` missing; labelled canaries without
            ``label_column``; another column without a value in ``fill``, or ``fill`` naming no column; a seed
            outside 0..2**63-1.
    """
    from datasets import Dataset, concatenate_datasets

    manifest = as_manifest(manifest, "insert_canaries")
    checks.seed("insert_canaries: seed", seed)  # a negative one crashed the shuffle's NumPy generator
    if not isinstance(dataset, Dataset):
        name = type(dataset).__name__
        hint = (f"pass its training split: insert_canaries(ds[{next(iter(dataset), 'train')!r}], ...)"
                if name == "DatasetDict" else "load it without streaming=True (a streamed dataset cannot be "
                "shuffled with the canaries as a whole)" if name.startswith("Iterable") else
                "for a list of texts add manifest.training_texts() and shuffle")
        raise DpauditError(f"insert_canaries needs a datasets.Dataset, got {name}; {hint}")
    if column not in dataset.column_names:
        raise DpauditError(f"the dataset has no column {column!r} (columns: {', '.join(dataset.column_names)}); "
                           "pass column= naming the text column")
    kind = getattr(dataset.features[column], "dtype", None)
    if kind not in ("string", "large_string"):
        raise DpauditError(f"the dataset's column {column!r} is not text ({dataset.features[column]}); insert the "
                           "canaries into the text column before tokenizing (dataset.map(tokenize) afterwards)")
    fill = dict(fill or {})
    if manifest.plan.labels:
        if not label_column or label_column not in dataset.column_names:
            raise DpauditError("these canaries carry labels: pass label_column= naming the dataset's label column")
    elif label_column:
        raise DpauditError("label_column is set but these canaries carry no labels (canaries.labels = 0)")
    others = [c for c in dataset.column_names if c not in (column, label_column)]
    missing = [c for c in others if c not in fill]
    if missing:
        raise DpauditError(f"the dataset's column {missing[0]!r} needs a value for the canary rows: pass "
                           f"fill={{{missing[0]!r}: ...}}")
    unknown = sorted(set(fill) - set(others))
    if unknown:
        raise DpauditError(f"fill names {unknown[0]!r}, which is not another column of the dataset")
    recs = manifest.records(column)
    if label_column:
        recs = [{column: r[column], label_column: r["label"]} for r in recs]
    rows = [{**r, **fill} for r in recs]
    if not rows:
        return dataset.shuffle(seed=seed)
    try:
        extra = Dataset.from_list(rows, features=dataset.features)
    except Exception as e:  # noqa: BLE001 - arrow's casts raise ValueError, TypeError or ArrowInvalid
        types = ", ".join(f"{k}: {v}" for k, v in list(dataset.features.items())[:6])
        raise DpauditError(f"the canary rows do not fit the dataset's column types ({types}): {first_line(e)}; "
                           "pass fill= values of each column's type (and a string text column)") from None
    return concatenate_datasets([dataset, extra]).shuffle(seed=seed)


def write_records(manifest: Manifest, path: Path, column: str = "text") -> int:
    """The records to insert, as JSONL, for a training stack that reads files.

    Args:
        manifest: The canaries' :class:`Manifest` (the inserted ones, each ``repetitions`` times).
        path: The JSONL file to write (one ``{column: text}`` object per line; classifier canaries add ``label``),
            written atomically through dpaudit's one writer.
        column: The text field's name.

    Returns:
        How many records were written.
    """
    save, n = records_writer(as_manifest(manifest, "write_records"), column)
    write_atomic(Path(path), save)
    return n


def records_writer(manifest: Manifest, column: str = "text"):
    """(save(path), how many): the records file's writer, for writing it together with the manifest."""
    recs = manifest.records(column)
    return (lambda tmp: tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))), len(recs)
