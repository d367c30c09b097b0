"""An online alarm is evidence (issue wave 5 · 3/5): the check it names fails in the mechanism checks — which
evaluate and the gate's re-derivation both run — with the step it fired at and the online test's false-alarm share,
whatever the offline test over the whole run said; a record without alarms is left as it was; a damaged online
record is not a crash."""

from dpaudit.audit import mechanism_checks as mc

ROWS = [mc.row(c, "pass", "fine", 0.001) for c in ("noise", "sampling", "clipping", "steps", "divisor")] + \
    [mc.row("coverage", "not tested", "no model", None)]


def test_an_alarm_fails_its_check_with_its_step_and_rate():
    online = {"alpha": 0.001, "statistical": ["noise", "sampling"], "steps": 90,
              "alarms": {"noise": {"step": 61, "finding": "the noise added at step 61 and before is below sigma"},
                         "coverage": {"step": 3, "finding": "wte.weight changed outside the DP optimizer"}}}
    out = {r.check: r for r in mc.with_online_alarms(ROWS, online)}
    assert out["noise"].status == "fail" and out["noise"].values["online_step"] == 61
    assert out["noise"].false_alarm == 0.0005 and "online, at step 61" in out["noise"].finding
    assert "offline test over the whole run: pass" in out["noise"].finding
    assert out["coverage"].status == "fail" and out["coverage"].false_alarm == 0.0  # deterministic alarm
    assert [out[c].status for c in ("sampling", "clipping", "steps", "divisor")] == ["pass"] * 4


def test_no_alarm_or_a_damaged_record_changes_nothing():
    for online in (None, {}, {"alarms": {}}, {"alarms": "x"}, "junk", {"alarms": {"noise": "not a dict"}}):
        assert mc.with_online_alarms(ROWS, online) == ROWS
    odd = mc.with_online_alarms(ROWS, {"alpha": "?", "alarms": {"sampling": {"step": "7", "finding": None}}})
    assert {r.check: r.status for r in odd}["sampling"] == "fail"  # claimed by the record itself: it fails
