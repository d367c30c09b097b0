"""The evaluation plan fixed in the manifest before training: used by default, departures refused or marked."""

import pytest

from dpaudit.canaries import plan as eval_plan
from dpaudit.canaries.manifest import CanaryPlan, generate, manifest_from_dict
from dpaudit.errors import DpauditError

PLAN = eval_plan.planned(["loss", "zlib"], "bonferroni", 0.95, 500)


def test_no_plan_uses_what_is_given_and_says_so():
    used, entry = eval_plan.resolve(None, confidence=0.9, attacks=None, rule=None, n_references=None)
    assert used["confidence"] == 0.9 and used["rule"] == "bonferroni" and used["n_references"] == 2000
    assert entry["status"] == "unplanned" and entry["departures"] == []


def test_plan_is_the_default_and_attack_order_does_not_matter():
    used, entry = eval_plan.resolve(PLAN, attacks=None, rule=None, confidence=None, n_references=None)
    assert used == PLAN and entry["status"] == "as planned"
    _, entry = eval_plan.resolve(PLAN, attacks=["zlib", "loss"], rule="bonferroni", confidence=0.95, n_references=500)
    assert entry["status"] == "as planned"


@pytest.mark.parametrize("key, value, flag", [("confidence", 0.99, "--confidence"), ("rule", "held_out", "--rule"),
                                              ("n_references", 100, "--references"), ("attacks", ["loss"], "--attacks")])
def test_a_departure_is_refused_unless_marked(key, value, flag):
    given = {"attacks": None, "rule": None, "confidence": None, "n_references": None, key: value}
    with pytest.raises(DpauditError, match=flag):
        eval_plan.resolve(PLAN, **given)
    used, entry = eval_plan.resolve(PLAN, off_plan=True, **given)
    assert entry["status"] == "off-plan" and len(entry["departures"]) == 1 and key in entry["departures"][0]


def test_manifest_keeps_the_plan_and_refuses_a_bad_one():
    man = generate(CanaryPlan(m=10, evaluation=PLAN))
    again = manifest_from_dict(man.to_dict())
    assert again.plan.evaluation == PLAN and again.canaries == man.canaries
    bad = man.to_dict()
    bad["audit_plan"]["evaluation"] = {**PLAN, "confidence": 1.5}
    with pytest.raises(DpauditError, match="confidence"):
        manifest_from_dict(bad)
    old = man.to_dict()
    del old["audit_plan"]["evaluation"]  # a manifest written before plans existed
    assert manifest_from_dict(old).plan.evaluation is None


def test_the_gate_fails_an_off_plan_report():
    import json
    from pathlib import Path

    from dpaudit.gate.policy import Policy, check

    r = json.loads((Path(__file__).resolve().parents[2] / "reports/demo/dp-eps8/report/report.json").read_text())
    r["audit_plan"] = {"status": "off-plan", "planned": PLAN, "used": PLAN, "departures": ["confidence: planned 0.95, used 0.8"]}
    assert any("departs from the plan" in f for f in check(r, Policy()))
