"""Accounting answers kept on disk, keyed by the mechanism, so a card is accounted once per machine.

``dpaudit account --card``, ``dpaudit evaluate`` and every variant of ``dpaudit run`` ask the same accountants about
the same mechanism; a PLD or PRV pass at a fine discretisation costs seconds and the Opacus accountants import
torch. The answer (an interval, or the accountant's "not applicable" reason) is stored under
``$DPAUDIT_CACHE/accounting/`` (default ``~/.cache/dpaudit``), named by a SHA-256 of everything it depends on: the
accountant, the events (every field), δ, the neighbouring relation, the dataset size, the source of every module
of dpaudit/accounting/ and the versions of opacus and dp-accounting.
A different mechanism, code or library version is a different key, never a stale answer. A file that cannot be
read or parsed is ignored and recomputed; a cache that cannot be written is skipped silently (it is an
optimisation, never a requirement). ``DPAUDIT_ACCOUNTING_CACHE=0`` turns it off.

The cache is trusted as the installed code is: it lives in the user's own folder, and a file edited to a wrong
interval changes what ``dpaudit account`` prints on that machine only (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

VERSION = 1


def enabled() -> bool:
    return os.environ.get("DPAUDIT_ACCOUNTING_CACHE", "1").lower() not in ("0", "false", "no", "off")


def folder() -> Path:
    return Path(os.environ.get("DPAUDIT_CACHE", Path.home() / ".cache" / "dpaudit")).expanduser() / "accounting"


def _code_digest(backend_module: str) -> str:
    here = Path(__file__).resolve().parent
    h = hashlib.sha256(backend_module.encode())
    for f in sorted(here.glob("*.py")):  # every accountant's helpers too (lmo_vector reads lmo_noise, ...)
        try:
            h.update(f.name.encode() + f.read_bytes())
        except OSError:
            h.update(f.name.encode())
    for dist in ("opacus", "dp-accounting"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()


def key(accountant: str, backend_module: str, events: tuple, delta: float, relation: str, dataset_size) -> str:
    body = {"v": VERSION, "accountant": accountant, "events": [e.to_dict() for e in events], "delta": repr(float(delta)),
            "relation": relation, "dataset_size": dataset_size, "code": _code_digest(backend_module)}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=repr).encode()).hexdigest()


def get(k: str) -> dict | None:
    """The stored answer: {"lower", "upper", "detail"} or {"not_applicable": reason}; None when absent or unusable."""
    if not enabled():
        return None
    p = folder() / f"{k}.json"
    try:
        if not p.is_file() or p.stat().st_size > 65536:
            return None
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("key") != k:
        return None
    if "not_applicable" in d:
        return d if isinstance(d["not_applicable"], str) else None
    lo, hi = d.get("lower"), d.get("upper")
    if not all(x is None or (isinstance(x, (int, float)) and x == x) for x in (lo, hi)) or hi is None:
        return None
    if not isinstance(d.get("detail", ""), str):
        return None
    return d


def put(k: str, answer: dict) -> None:
    if not enabled():
        return
    d = folder()
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{k}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({**answer, "key": k}))
        os.replace(tmp, d / f"{k}.json")
    except OSError:
        return
