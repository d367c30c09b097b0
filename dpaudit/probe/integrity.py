"""What holds a white-box record's parts together (docs/security.md, "Typed records"): the sha256 a record keeps
of each array file it names, compared whenever the file is read, and the one step count every part of the record
states. Read by :mod:`dpaudit.probe.record` and :mod:`dpaudit.probe.readback`; NumPy-free.
"""

from __future__ import annotations

import hashlib


def digest(data: bytes) -> str:
    """The sha256 a record keeps of each array file it names (hex)."""
    return hashlib.sha256(data).hexdigest()


def check_digest(f, recorded: str | None, record_name: str) -> None:
    """Refuse (one line) an array file whose bytes are not the ones its record names by sha256 (records written
    before the digests name none: nothing to compare)."""
    from pathlib import Path

    from dpaudit.errors import DpauditError

    if recorded is None:
        return
    h = hashlib.sha256()
    with open(Path(f), "rb") as fh:  # in chunks: a planted file of any size costs no memory
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    got = h.hexdigest()
    if got != recorded:
        raise DpauditError(f"{f}: its sha256 ({got[:12]}...) is not the one {record_name} records ({recorded[:12]}...): "
                           "the file was changed after the run or comes from another run; restore the file written "
                           "with the record")


def check_steps(f, record: dict, steps_rows: int | None = None) -> int:
    """The record's step count, the same wherever the record states it (its ``steps``, ``online.steps`` and
    ``online.values`` = steps x m, ``probe.steps``, the per-step projections' rows): an edited count would change
    the statistic silently, so a disagreement is refused in one line. Returns the count."""
    from dpaudit.errors import DpauditError

    online = record.get("online") if isinstance(record.get("online"), dict) else {}
    probe = record.get("probe") if isinstance(record.get("probe"), dict) else {}
    seen = {"steps": record.get("steps"), "online.steps": online.get("steps"), "probe.steps": probe.get("steps"),
            "the per-step projections' rows": steps_rows}
    if online.get("values") is not None and record.get("m") is not None:
        m = int(record["m"])
        seen["online.values / m"] = int(online["values"]) // m if m and int(online["values"]) % m == 0 else -1
    stated = {k: int(v) for k, v in seen.items() if v is not None}
    if len(set(stated.values())) > 1:
        raise DpauditError(f"{f}: the record's step counts disagree ({', '.join(f'{k} {v}' for k, v in stated.items())}): "
                           "it was edited or its files come from different runs; restore the record written with "
                           "the model")
    return next(iter(stated.values()), 0)
