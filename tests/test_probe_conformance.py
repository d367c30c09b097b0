"""The probe on the loops teams write (experiments/probe_loops.py; the full table, 20 seeds each, is
reports/probe/conformance.md by ``experiments/probe_conformance.py``): every honest loop pattern trains to the end
with the probe attached and passes the gate; every planted bug makes the gate's FAIL line name the check that
catches it. One seed each, on a shorter run than the table's (the table measures rates; this holds the line)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


PL = _load("probe_loops")
CONF = _load("probe_conformance")
SMALL = PL.Settings(epochs=4, m=100)  # 100 noisy steps


def test_the_suite_is_as_wide_as_promised():
    assert len(PL.LOOPS) >= 20 and len(PL.BUGS) >= 17  # today's five and at least twelve more
    assert {"noise", "sampling", "clipping", "steps", "divisor", "coverage"} == {c for _, c in PL.BUGS.values()}


@pytest.mark.parametrize("loop", list(PL.LOOPS))
def test_an_honest_loop_trains_to_the_end_and_passes_the_gate(loop, tmp_path):
    row = CONF.one(PL, loop, None, 0, tmp_path, SMALL)
    assert "crash" not in row, row.get("trace")
    assert row["gate_exit"] == 0, row["fail_lines"]
    assert not row["online_alarm_step"], row["online_alarm_step"]
    expected_not_tested = {"coverage"} if not PL.LOOPS[loop].pass_model else set()
    assert {c for c, s in row["checks"].items() if s == "not tested"} <= expected_not_tested | {"divisor"}, row["checks"]


@pytest.mark.parametrize("bug", list(PL.BUGS))
def test_a_planted_bug_is_named_by_the_gate(bug, tmp_path):
    row = CONF.one(PL, "opacus-tutorial", bug, 0, tmp_path, SMALL)
    assert "crash" not in row, row.get("trace")
    assert row["named_fail_line"], (PL.BUGS[bug], row["fail_lines"], row["checks"])


def test_on_fail_raise_stops_the_loop_at_the_step_that_fails(tmp_path):
    from dpaudit.probe.online import ProbeFailure

    s = PL.Settings(epochs=4, m=100, on_fail="raise")
    with pytest.raises(ProbeFailure, match="mechanism check 'noise' failed at step 1"):
        PL.run("opacus-tutorial", "half-noise", 0, tmp_path, s)
