"""Every numeric gate rule in both directions and at its boundary ([0/5] item 5): a report exactly at a rule's limit
passes it, one just past fails it, on a real end-to-end report (tests/conftest.py's run) with one field moved; and
the rules the other tests never reached: require_mechanism_checks, a named accounting_reference, comparison
reports (a variant's failure fails the whole)."""

from __future__ import annotations

import copy
import json

import pytest

from dpaudit.errors import DpauditError
from dpaudit.gate import policy

OPEN = dict(no_empirical_above_claim=False, accounting=(), empirical=(), allowed_verdicts=(), max_claimed_epsilon=None,
            intended_tolerance=None, mechanism_checks=())  # every rule off: one rule at a time below
EPS = 1e-9


@pytest.fixture(scope="module")
def base(run_dir):
    r = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    assert policy.check(r, policy.Policy(**OPEN)) == []
    return r


def _fails(r: dict, **rule) -> list[str]:
    return policy.check(r, policy.Policy(**{**OPEN, **rule}))


def _claim(r: dict) -> float:
    return float(r["claim"]["epsilon"])


def test_the_budget_is_inclusive(base):
    c = _claim(base)
    assert _fails(base, max_claimed_epsilon=c) == []
    assert "above the budget" in _fails(base, max_claimed_epsilon=c - EPS)[0]


def test_an_empirical_bound_equal_to_the_claim_passes_one_above_fails(base):
    c = _claim(base)
    for value, fails in ((c, False), (c + EPS, True)):
        r = copy.deepcopy(base)
        row = next(e for e in r["empirical"] if e["delta_kind"] == "claimed")
        row["epsilon_lb"] = value
        assert bool(_fails(r, no_empirical_above_claim=True)) == fails, value


def test_the_accuracy_floor_is_inclusive(base):
    acc = base["metrics"]["accuracy"]
    assert _fails(base, min_accuracy=acc) == []
    assert "below the floor" in _fails(base, min_accuracy=acc + EPS)[0]
    r = copy.deepcopy(base)
    r["metrics"].pop("accuracy")
    assert "no accuracy in the report" in _fails(r, min_accuracy=0.0)[0]  # a floor with nothing to compare fails


def test_the_exposure_ceiling_is_inclusive(base):
    worst = max(c["exposure"] for c in base["exposure"]["canaries"])
    assert _fails(base, max_exposure=worst) == []
    assert "exposure" in _fails(base, max_exposure=worst - EPS)[0]


@pytest.mark.parametrize("tolerance", [0.0, 0.01, 0.5])
def test_intended_vs_achieved_at_the_tolerance(base, tolerance):
    c = _claim(base)
    for intended, fails in ((c / (1 + tolerance), False), (c / (1 + tolerance) * (1 - 1e-6), True), (c * 2, False)):
        r = copy.deepcopy(base)
        r["claim"]["intended_epsilon"] = intended
        got = _fails(r, intended_tolerance=tolerance)
        assert bool(got) == fails, (intended, got)
        if fails:
            assert "more than the epsilon" in got[0] and "trained for" in got[0]


def test_a_named_accounting_reference_at_the_tolerance(base):
    c, tol = _claim(base), 0.02
    name = base["accounting"]["results"][0]["accountant"]
    for value, fails in ((c * (1 + tol), False), (c * (1 + tol) * (1 + 1e-6), True)):
        r = copy.deepcopy(base)
        r["accounting"]["results"][0]["epsilon"] = value
        got = _fails(r, accounting_reference=name, accounting_tolerance=tol)
        assert bool(got) == fails, (value, got)
        if fails:
            assert f"({name}) exceeds the claim" in got[0]
    with pytest.raises(DpauditError, match="not in the report"):
        _fails(base, accounting_reference="no-such-accountant", accounting_tolerance=tol)


def _with_checks(r: dict, statuses: dict) -> dict:
    r = copy.deepcopy(r)
    r["mechanism_checks"] = [{"attack": "whitebox_gradient", "mode": "hooks", "coordinates": "block",
                              "optimizer": "DPOptimizer", "world_size": 1, "bound_to_card": True,
                              "false_alarm_each": 0.001,
                              "checks": [{"check": k, "status": v, "finding": f"{k} {v}", "false_alarm": 0.001}
                                         for k, v in statuses.items()]}]
    return r


@pytest.mark.parametrize("statuses,require,fails", [
    ({"noise": "pass", "sampling": "pass"}, True, False),
    ({"noise": "pass", "sampling": "not tested"}, True, True),  # required: not tested is not enough
    ({"noise": "pass", "sampling": "not tested"}, False, False),
    ({"noise": "fail", "sampling": "pass"}, False, True),  # a failed check fails whether required or not
    (None, True, True),  # no probe record at all
    (None, False, False),
])
def test_mechanism_checks_required_or_not(base, statuses, require, fails):
    r = copy.deepcopy(base) if statuses is None else _with_checks(base, statuses)
    if statuses is None:
        r["mechanism_checks"] = []
    got = _fails(r, mechanism_checks=("noise", "sampling"), require_mechanism_checks=require)
    assert bool(got) == fails, got
    if statuses is None and fails:
        assert "was not run" in got[0]


def test_checks_of_a_record_the_card_does_not_bind_do_not_satisfy_a_policy_that_requires_them(base):
    """A record of any run can be copied beside a card that names no probe run: its passing checks are shown, but a
    policy that requires mechanism checks does not count them (a failed one still fails the gate)."""
    r = _with_checks(base, {"noise": "pass", "sampling": "pass"})
    r["mechanism_checks"][0]["bound_to_card"] = False
    got = _fails(r, mechanism_checks=("noise", "sampling"), require_mechanism_checks=True)
    assert len(got) == 1 and "does not bind" in got[0] and "--probe-record" in got[0]
    assert _fails(r, mechanism_checks=("noise", "sampling"), require_mechanism_checks=False) == []
    r["mechanism_checks"][0]["checks"][0]["status"] = "fail"
    assert _fails(r, mechanism_checks=("noise", "sampling"), require_mechanism_checks=False)


def test_a_comparison_fails_when_one_variant_fails_and_passes_when_all_pass(base):
    ok, bad = copy.deepcopy(base), copy.deepcopy(base)
    bad["checkpoint"]["variant"] = "the-bad-one"
    bad["claim"]["epsilon"] = _claim(base) + 1.0
    budget = dict(max_claimed_epsilon=_claim(base))
    comparison = {"kind": "comparison", "variants": {"a": ok, "b": copy.deepcopy(ok)}}
    assert policy.check_any(comparison, policy.Policy(**{**OPEN, **budget})) == []
    comparison["variants"]["b"] = bad
    got = policy.check_any(comparison, policy.Policy(**{**OPEN, **budget}))
    assert len(got) == 1 and got[0].startswith("the-bad-one:") and "above the budget" in got[0]
