"""Small file helpers with no heavy imports (``dpaudit check`` and ``compare`` load through these without
torch): JSON and TOML readers whose failures are one-line :class:`DpauditError` messages naming the fix,
and strict JSON values (infinities as the string "inf")."""

from __future__ import annotations

import json
import math
from pathlib import Path

from dpaudit.errors import DpauditError


def read_json(path: Path, what: str, fix: str) -> dict:
    """A JSON file, or a one-line DpauditError (missing file, unreadable, invalid JSON)."""
    path = Path(path)
    if not path.is_file():
        raise DpauditError(f"{what} not found at {path}; {fix}")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise DpauditError(f"cannot read {what} {path}: {e}") from None
    except json.JSONDecodeError as e:
        raise DpauditError(f"{what} {path} is not valid JSON (line {e.lineno}: {e.msg})") from None


def read_toml(path: Path, what: str, fix: str) -> dict:
    """A TOML file as a dict, or a one-line DpauditError (missing file, invalid TOML)."""
    import tomllib

    path = Path(path)
    if not path.is_file():
        raise DpauditError(f"{what} {path} not found; {fix}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise DpauditError(f"{what} {path} is not valid TOML: {e}") from None


def write_atomic(path: Path, save) -> None:
    """``save(tmp)`` writes the file beside ``path`` first, which then replaces ``path`` in one step: a failure
    leaves no partial file."""
    import os

    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    save(tmp)
    os.replace(tmp, path)


def jsonable(x):
    """Strict JSON: infinities and NaN become strings ("inf", "nan"; readers map "inf" back)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    return x


def number(x):
    """A value read back from strict JSON: "inf" is infinity again."""
    return math.inf if x == "inf" else x
