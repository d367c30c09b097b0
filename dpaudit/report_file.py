"""The one reader of a report.json that every command taking one uses (`check`, `compare`, `model-card`, and `table`
through :mod:`dpaudit.run_folder`): the file's JSON, its schema version and kind, its JSON Schema
(dpaudit/schemas/report.schema.json: every key it requires is typed) and a finite claim; anything else is bad
input in one line (exit 2), never read as a number it is not. A shared module: it imports no stage."""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit import checks, options
from dpaudit.errors import DpauditError
from dpaudit.io import read_json, refuse_other_kind

SCHEMA_VERSION = 1  # bumped on any incompatible change of report.json (dpaudit/report/write.py's stability rules)


def load(path: Path) -> dict:
    """A report.json that matches its JSON Schema, holds at least one evaluation, and whose claims are finite or
    null."""
    r = read_json(path, "report", "pass the report.json written by `dpaudit evaluate`")
    if not isinstance(r, dict):
        raise DpauditError(f"report {path} must hold a JSON object, not a {type(r).__name__}")
    refuse_other_kind(r, path, "a report")
    check(r, path)
    return r


def check(r: dict, path: Path) -> None:
    """:func:`load`'s checks of a report already read (``path`` names it in the errors)."""
    if r.get("schema_version") != SCHEMA_VERSION:
        raise DpauditError(f"report {path} has schema_version {r.get('schema_version')!r}; this dpaudit reads "
                           f"{SCHEMA_VERSION}")
    if r.get("kind") not in ("evaluation", "comparison"):
        raise DpauditError(f"report {path} has kind {r.get('kind')!r}, neither an evaluation nor a comparison report")
    if r["kind"] == "comparison" and not r.get("variants"):
        raise DpauditError(f"comparison report {path} has no variants: nothing was evaluated, so nothing can pass")
    _validate(r, path)
    for v in (r["variants"].values() if r["kind"] == "comparison" else [r]):
        options.current_words(v)
        eps = v["claim"]["epsilon"]
        if eps is not None and (not checks.finite(eps) or eps <= 0):
            raise DpauditError(f"report {path}: claim.epsilon {eps!r} is not a claim (a finite number > 0, or null for "
                               "none); fix the privacy card and re-evaluate")


def _validate(r: dict, path: Path) -> None:
    import jsonschema

    from dpaudit.checks import schema_validator

    if r["kind"] not in _VALIDATORS:  # one validator per kind: the schema's oneOf would report the other branch
        schema = json.loads((Path(__file__).parent / "schemas" / "report.schema.json").read_text())
        schema.pop("oneOf")
        _VALIDATORS[r["kind"]] = schema_validator({**schema, "$ref": f"#/$defs/{r['kind']}"})
    err = jsonschema.exceptions.best_match(_VALIDATORS[r["kind"]].iter_errors(r))
    if err is not None:
        where = "/".join(str(x) for x in err.absolute_path) or "(top level)"
        raise DpauditError(f"report {path} does not match the report schema at {where}: {err.message[:200]}; "
                           "regenerate it with `dpaudit evaluate`")


_VALIDATORS: dict = {}
