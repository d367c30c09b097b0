"""The policy's mechanism-check rules (``[rules] mechanism_checks`` and ``require_mechanism_checks``,
dpaudit/gate/policy.py): a failed check the policy names fails the gate; where the policy requires them, so does a
check that was not run, not tested, or read from a record the card does not bind."""

from __future__ import annotations

from dpaudit.audit import check_registry
from dpaudit.markup import percent


def failures(name: str, r: dict, mechanism_checks: tuple | None, require: bool) -> list[str]:
    """The probe's mechanism checks the policy names: a failed one fails the gate; with require_mechanism_checks,
    so does one that was not run or not tested."""
    fails = []
    seen: dict[str, list] = {}
    named = check_registry.names() if mechanism_checks is None else mechanism_checks
    for e in r.get("mechanism_checks") or []:
        for c in e["checks"]:
            seen.setdefault(c["check"], []).append(c)
            if c["check"] in named and c["status"] == "fail":
                rate = "deterministic" if not c["false_alarm"] else f"false-alarm rate {percent(c['false_alarm'], 1)}"
                fails.append(f"{name}: mechanism check '{c['check']}' ({e['attack']}, {rate}): {c['finding']}")
    if require:  # "records" appears only when it fails: the probe's checks are the ones run
        loose = [e for e in r.get("mechanism_checks") or [] if e.get("mode") != "records missing"
                 and not e.get("bound_to_card")]
        if loose:  # a record of any run can be copied beside a card that names none: not this model's evidence
            fails.append(f"{name}: the mechanism checks come from a probe record the privacy card does not bind (it "
                         "names no probe run), so nothing shows they are this model's run; the policy requires them: "
                         "write the card with `dpaudit card ... --probe-record FILE` (or card_from_opacus)")
            return fails
        for check in [c for c in named if c != "records"]:  # the probe's checks and the registered ones
            got = seen.get(check, [])
            if not got:
                fails.append(f"{name}: mechanism check '{check}' was not run (no probe record in the checkpoint) but "
                             "the policy requires it; attach dpaudit's probe to the training loop")
            elif any(c["status"] == "not tested" for c in got):
                why = next(c["finding"] for c in got if c["status"] == "not tested")
                fails.append(f"{name}: mechanism check '{check}' was not tested ({why}) but the policy requires it")
    return fails
