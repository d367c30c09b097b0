"""true where a config holds a number: Python's bool is an int (true == 1, true > 0), so a check written as
``isinstance(v, int)`` let ``batch_size = true`` train with batches of one. Every numeric entry of every committed
config one method each (the hostile round's, experiments/hostile_fuzz.py) set to true must be refused by the dry run
in one line, exit 2."""

from __future__ import annotations

import contextlib
import io
import tomllib

import pytest

from dpaudit.cli import main
from tests.scripts_loader import ROOT, load_script

fuzz = load_script("experiments", "hostile_fuzz")


def _numeric_entries(rel: str):
    d = tomllib.loads((ROOT / "configs" / rel).read_text())
    return d, [at for at, v in fuzz.leaves(d) if isinstance(v, (int, float)) and not isinstance(v, bool)
               and not any(isinstance(k, int) and k > 0 for k in at)]  # the first variant stands for the others


@pytest.mark.parametrize("rel", fuzz.CONFIGS)
def test_true_for_a_number_is_refused_in_every_config(rel, tmp_path):
    d, entries = _numeric_entries(rel)
    assert entries, rel
    accepted = []
    for at in entries:
        cfg = tmp_path / "c.toml"
        cfg.write_text(fuzz.toml_text(fuzz.edited(d, at, True)))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", str(cfg), "--out", str(tmp_path / "out"), "--dry-run"])
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip() and not ln.startswith("warning")]
        if code != 2 or len(lines) != 1:
            accepted.append((".".join(map(str, at)), code, lines[-1:]))
    assert not accepted, accepted
    assert not (tmp_path / "out").exists()
