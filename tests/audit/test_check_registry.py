"""A mechanism check of one's own, through the public calls only (docs/architecture.md, "Extension points"):
registered with dpaudit.api.register_mechanism_check, it runs in `dpaudit evaluate` and `check --checkpoint` beside
the probe's six, a failure makes the verdict mechanism-mismatch, and the default policy applies it."""

from __future__ import annotations

import json
import types

import pytest

from dpaudit import api
from dpaudit.cli import main
from dpaudit.errors import DpauditError


def _largest_batch(limit: float):
    """Fails when a logical batch held more than ``limit`` times the card's expected batch size (deterministic:
    a real check one might add, e.g. for a memory-bounded loop that must never exceed a batch cap)."""
    def check(readings, card):
        if not card.expected_batch_size or readings.records.size == 0:
            return "not tested", "the card states no expected batch size, or no records were counted"
        top = int(readings.records.max())
        if top > limit * card.expected_batch_size:
            return "fail", f"a logical batch held {top} records, over {limit:g} x the card's {card.expected_batch_size:g}"
        return "pass", f"the largest logical batch held {top} records"

    return types.SimpleNamespace(NAME="largest_batch", FALSE_ALARM=0.0, check=check)


@pytest.mark.slow
@pytest.mark.parametrize("limit,fails", [(100.0, False), (0.5, True)])
def test_a_registered_check_runs_end_to_end_and_the_default_gate_applies_it(run_dir, tmp_path, capsys, limit, fails):
    remove = api.register_mechanism_check(_largest_batch(limit))
    try:
        ck = run_dir / "dp" / "checkpoint"
        assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--quiet"]) == 0
        r = json.loads((tmp_path / "r" / "report.json").read_text())
        rows = {c["check"]: c for e in r["mechanism_checks"] for c in e["checks"]}
        assert rows["largest_batch"]["status"] == ("fail" if fails else "pass")
        assert {"noise", "sampling", "clipping", "steps", "divisor"} <= set(rows)  # beside the probe's own
        assert (r["verdict"]["status"] == "mechanism-mismatch") == fails
        capsys.readouterr()
        rc = main(["check", str(tmp_path / "r" / "report.json"), "--checkpoint", str(ck)])
        out = capsys.readouterr().out
        assert "FAIL re-derived from" not in out  # check --checkpoint re-derives the registered check and agrees
        assert rc == (1 if fails else 0), out
        if fails:
            assert "mechanism check 'largest_batch'" in out and "deterministic" in out
            assert "largest_batch" in (tmp_path / "r" / "REPORT.md").read_text()
    finally:
        remove()
    from dpaudit.audit import check_registry

    assert "largest_batch" not in check_registry.names()


@pytest.mark.parametrize("obj,needle", [
    (types.SimpleNamespace(NAME="Noise!", FALSE_ALARM=0.0, check=lambda r, c: ("pass", "")), "lowercase word"),
    (types.SimpleNamespace(NAME="noise", FALSE_ALARM=0.0, check=lambda r, c: ("pass", "")), "exists already"),
    (types.SimpleNamespace(NAME="mine", FALSE_ALARM=1.5, check=lambda r, c: ("pass", "")), "FALSE_ALARM"),
    (types.SimpleNamespace(NAME="mine", FALSE_ALARM=0.0), "needs check"),
])
def test_a_check_that_cannot_be_registered_is_one_line(obj, needle):
    with pytest.raises(DpauditError, match=needle) as e:
        api.register_mechanism_check(obj)
    assert "\n" not in str(e.value)


def test_a_check_that_raises_or_answers_nonsense_fails_with_the_reason_and_never_crashes():
    from dpaudit.audit import mechanism_checks as mc
    from dpaudit.audit.simulated_readings import CARD, readings

    def boom(r, c):
        raise RuntimeError("no")

    removes = [api.register_mechanism_check(types.SimpleNamespace(NAME="boom", FALSE_ALARM=0.0, check=boom)),
               api.register_mechanism_check(types.SimpleNamespace(NAME="odd", FALSE_ALARM=0.01,
                                                                  check=lambda r, c: ("maybe", "?")))]
    try:
        rows = {c.check: c for c in mc.run(readings(0), CARD)}
    finally:
        for remove in removes:
            remove()
    assert rows["boom"].status == "fail" and "RuntimeError: no" in rows["boom"].finding
    assert rows["odd"].status == "fail" and "'maybe'" in rows["odd"].finding
    assert rows["noise"].status == "pass"  # the shipped checks are unaffected
