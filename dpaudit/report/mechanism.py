"""The mechanism checks of a report (dpaudit/audit/mechanism_checks.py) in REPORT.md: one summary line and one
table. Reports without a probe have none and render nothing here."""

from __future__ import annotations

from dpaudit.markup import percent


def summary_line(r: dict) -> list[str]:
    out = []
    for e in r.get("mechanism_checks") or []:
        if e.get("mode") == "records missing":
            out.append(f"- Mechanism checks: **records failed**: {e['checks'][0]['finding']}.")
            continue
        failed = [c["check"] for c in e["checks"] if c["status"] == "fail"]
        passed = [c["check"] for c in e["checks"] if c["status"] == "pass"]
        untested = [c["check"] for c in e["checks"] if c["status"] == "not tested"]
        head = (f"**{len(failed)} failed ({', '.join(failed)})**" if failed else
                f"{len(passed)} of {len(e['checks'])} pass")
        rest = f"; not tested: {', '.join(untested)}" if untested else ""
        unbound = ("" if e.get("bound_to_card") else " — of a record the card does not bind (it names no probe "
                   "run), so nothing shows the record is this model's run: bind it with `dpaudit card ... "
                   "--probe-record FILE` or card_from_opacus")
        out.append(f"- Mechanism checks (probe on {e['optimizer'] or 'the optimizer'}, {e['mode']} mode, canaries on the "
                   f"{e['coordinates']} coordinates): {head}{rest}. The code that ran "
                   f"{'does not match' if failed else 'matches'} its card on what was checked{unbound}.")
    return out


def table(r: dict) -> list[str]:
    out = []
    for e in r.get("mechanism_checks") or []:
        if e.get("mode") == "records missing":  # dpaudit/probe/readback.py: the card's probe records are not there
            out += ["| check | result | finding | false-alarm rate |", "|---|---|---|---|",
                    *[f"| {c['check']} | **{c['status'].upper()}** | {c['finding']} | 0 |" for c in e["checks"]], ""]
            continue
        where = ("a dedicated canary block the forward pass never reads: the audit sees the noise and sampling "
                 "path, not the clipping of real records" if e["coordinates"] == "block" else
                 "the model's trainable coordinates: the projections also carry the records' own gradients")
        out += [f"Probe `{e['attack']}`: {e['mode']} mode, {e.get('world_size', 1)} process(es), canaries on {where}. "
                f"Each statistical check's false-alarm rate is {percent(e['false_alarm_each'], 1)} (an honest run fails it that "
                "often); a rate of 0 marks a deterministic check. "
                + ("The record is bound to the card: the card names the run that wrote it." if e.get("bound_to_card")
                   else "The record is not bound to the card: the card names no probe run (a card written by hand, "
                   "or before run identities; `dpaudit card --probe-record FILE`, `probe.bind(card)` or "
                   "`card_from_opacus` with the probed optimizer names it), so nothing shows that the record and the "
                   "card come from one run: a policy that requires mechanism checks does not count it."), "",
                "| check | result | finding | false-alarm rate |", "|---|---|---|---|"]
        for c in e["checks"]:
            rate = "—" if c["false_alarm"] is None else f"{percent(c['false_alarm'], 1)}" if c["false_alarm"] else "0"
            status = f"**{c['status'].upper()}**" if c["status"] == "fail" else c["status"]
            out.append(f"| {c['check']} | {status} | {c['finding']} | {rate} |")
        out.append("")
    return out
