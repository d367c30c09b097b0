"""The hostile round's own writer: a config it edits must be the config it meant (experiments/hostile_fuzz.py), or
its cases test TOML the fuzzer garbled rather than the command."""

from __future__ import annotations

import importlib.util
import math
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("hostile_fuzz", ROOT / "experiments" / "hostile_fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@pytest.mark.parametrize("rel", [*fuzz.CONFIGS, "policy.toml"])
def test_every_config_it_edits_reads_back_as_written(rel):
    d = tomllib.loads((ROOT / "configs" / rel).read_text())
    assert tomllib.loads(fuzz.toml_text(d)) == d


def test_hostile_values_survive_the_writer_and_a_null_drops_the_key():
    d = {"a": {"x": 1.0, "y": "s"}, "v": [{"name": "n", "e": 2.0}, {"name": "m"}]}
    for at, v in fuzz.leaves(d):
        for name, new in fuzz.values(v):
            back = tomllib.loads(fuzz.toml_text(fuzz.edited(d, at, new, drop=name == "drop")))
            node = back
            for k in at[:-1]:
                node = node[k]
            if new is None:  # TOML has no null: the fuzzer's null is a dropped key
                assert at[-1] not in node if isinstance(node, dict) else True
            elif isinstance(new, float) and math.isnan(new):
                assert math.isnan(node[at[-1]])
            else:
                assert node[at[-1]] == new
