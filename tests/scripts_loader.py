"""One way for tests to import a script of the repository's experiments/ or scripts/ folders (not packages) by its
path: ``from tests.scripts_loader import load_script; PL = load_script("experiments", "probe_loops")``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(folder: str, name: str):
    """The module ``ROOT/folder/name.py``, registered as ``name`` in ``sys.modules`` (a script that imports a sibling
    by that name then finds this one)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
