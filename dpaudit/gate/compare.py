"""``dpaudit compare OLD NEW``: a markdown diff of two reports, with what regressed flagged, each row by its stated test.

A row is flagged **regressed** only by the test its ``test`` column names (:data:`TESTS`):

* ``exact`` — a deterministic value, the same every time the same run is evaluated (the claimed epsilon, the
  accounting interval, the audit ceiling, the verdict and its two checks, a mechanism check): any move the wrong way;
* ``95% intervals`` — an attack AUC, only when the new 95% interval lies wholly above the old one (two independent
  intervals that do not overlap: a conservative test);
* ``McNemar 5%`` / ``Newcombe 95%`` — accuracy, lower by McNemar's exact test where both reports carry per-example
  outcomes on the same test examples (dpaudit/report/paired.py), else only when Newcombe's unpaired 95% interval for
  the difference lies below 0;
* ``none`` — a sampled quantity with no test here (TPR at 1% FPR, mean exposure, the empirical lower bound, itself a
  95% bound whose rise past the claim is the verdict's ``violated``): shown, never flagged.
"""

from __future__ import annotations

from dpaudit.errors import DpauditError
from dpaudit.markup import md_tree
from dpaudit.options import VERDICT_RANK, verdict_name
from dpaudit.report import paired
from dpaudit.report.table import newcombe

# the test behind each kind of row (the module docstring): what `compare --fail-on-regression` fails on
TESTS = ("exact", "95% intervals", "McNemar 5%", "Newcombe 95%", "none")


def _metrics(r: dict) -> dict[str, tuple[float | None, int, str]]:
    """name -> (value, direction, test): direction +1 when larger is worse, -1 when smaller is worse; test one of
    :data:`TESTS` (the accuracy's is settled in :func:`compare_one`, where both reports are at hand)."""
    out: dict[str, tuple[float | None, int, str]] = {}
    e = r["claim"]["epsilon"]
    out["claimed ε"] = (float("inf") if e is None else e, +1, "exact")
    # the interval that decides the accounting check (as the comparison table): never a loose upper bound
    acc = r["accounting"]
    out["accounting: true ε at most (tightest sound upper)"] = (acc.get("certified_epsilon"), +1, "exact")
    out["accounting: true ε at least (largest lower)"] = (acc.get("lower_epsilon"), +1, "exact")
    best = r.get("empirical_best")
    out["empirical ε lower bound"] = (best["epsilon_lb"] if best else None, +1, "none")
    emp = r["verdict"].get("empirical") or {}
    out["audit ceiling (the most it could prove)"] = (emp.get("ceiling"), -1, "exact")
    for name, a in r.get("attacks", {}).items():
        out[f"AUC {name}"] = (a["auc"], +1, "95% intervals")
        out[f"TPR@1%FPR {name}"] = (a["tpr_at_1_fpr"], +1, "none")
    ex = r.get("exposure") or {}
    out["mean exposure, inserted (bits)"] = (ex.get("mean_inserted"), +1, "none")
    out["accuracy"] = ((r.get("metrics") or {}).get("accuracy"), -1, "Newcombe 95%")
    return out


def _accuracy_lower(old: dict, new: dict) -> tuple[str, bool | None]:
    """(test, lower?) for the new accuracy against the old: McNemar where both carry outcomes on the same test
    examples, else Newcombe's unpaired 95% interval (None: the reports lack the counts it needs)."""
    mo, mn = old.get("metrics") or {}, new.get("metrics") or {}
    if paired.can_pair(mn, mo):
        return "McNemar 5%", paired.compare(mn["correct"], mo["correct"]).reading() == "lower"
    pn, nn, po, no = mn.get("accuracy"), mn.get("n_test"), mo.get("accuracy"), mo.get("n_test")
    if not (isinstance(pn, (int, float)) and isinstance(po, (int, float)) and isinstance(nn, int)
            and isinstance(no, int) and nn > 0 and no > 0):
        return "Newcombe 95%", None
    return "Newcombe 95%", newcombe(float(pn), nn, float(po), no)[1] < 0


def _auc_intervals(old: dict, new: dict, key: str):
    """((old low, old high), (new low, new high)) of an attack's AUC when both reports carry its interval: an AUC
    is flagged only when the new interval lies wholly above the old (a conservative reading of two independent
    95% intervals); None for other quantities."""
    if not key.startswith("AUC "):
        return None
    name = key[len("AUC "):]
    cis = [((x.get("attacks") or {}).get(name) or {}).get("auc_ci") for x in (old, new)]
    pairs = [(float(c[0]), float(c[1])) for c in cis
             if isinstance(c, (list, tuple)) and len(c) == 2 and None not in c]
    return tuple(pairs) if len(pairs) == len(cis) else None


def _fmt(x) -> str:
    if x is None:
        return "—"
    if x == float("inf"):
        return "∞"
    return f"{x:.3f}"


def audit_of(r: dict) -> str:
    """What a report's empirical side audited: planted canaries, or a post-hoc audit (its kind)."""
    ph = r.get("posthoc")
    return f"a post-hoc audit ({ph.get('kind')})" if isinstance(ph, dict) else "planted canaries"


EMPIRICAL_ROWS = ("empirical ε lower bound", "audit ceiling (the most it could prove)", "AUC ", "TPR@1%FPR ",
                  "mean exposure")


def compare_one(old: dict, new: dict, title: str) -> tuple[list[str], int]:
    a, b = _metrics(old), _metrics(new)
    mo, mn = old.get("metrics") or {}, new.get("metrics") or {}
    pair = paired.compare(mn["correct"], mo["correct"]) if paired.can_pair(mn, mo) else None
    lines = [f"### {title}", ""]
    other_audit = audit_of(old) != audit_of(new)
    if other_audit:  # two readings of different tests: their empirical rows are shown, never flagged
        lines += [f"The empirical rows compare different audits (old: {audit_of(old)}, new: {audit_of(new)}): "
                  "their bounds, ceilings and attack rates are not one test's two readings, so none is flagged.", ""]
        a = {k: (v, d, "none" if k.startswith(EMPIRICAL_ROWS) else t) for k, (v, d, t) in a.items()}
        b = {k: (v, d, "none" if k.startswith(EMPIRICAL_ROWS) else t) for k, (v, d, t) in b.items()}
    lines += ["| quantity | old | new | change | test | |", "|---|---|---|---|---|---|"]
    regressions = 0
    for k in list(dict.fromkeys([*a, *b])):
        va, da, test = a.get(k, (None, 0, ""))
        vb, db, test_b = b.get(k, (None, 0, ""))
        test = test or test_b
        flag = ""
        if va is not None and vb is not None and va != float("inf") and vb != float("inf"):
            diff = vb - va
            moved = diff * (da or db) > 1e-9
            worse, note = moved and test == "exact", ""
            if k == "accuracy":
                test, lower = _accuracy_lower(old, new)
                worse = bool(lower)
                note = "not shown to be lower" if moved and not worse else ""
            ci = None if other_audit else _auc_intervals(old, new, k)
            if ci is not None and moved:
                worse = ci[1][0] > ci[0][1]
                note = "" if worse else "within the 95% intervals"  # overlapping: not shown to be higher
            elif test == "95% intervals" and moved:
                test, note = "none", "no intervals to test"  # a report without the AUC's interval
            if test == "none" and moved:
                note = note or "not tested"
            flag = "**regressed**" if worse else note
            regressions += bool(worse)
            change = f"{diff:+.3f}"
        else:
            change = "" if va == vb else "changed"
        lines.append(f"| {k} | {_fmt(va)} | {_fmt(vb)} | {change} | {test} | {flag} |")
    if pair is not None:
        lines.append(f"| accuracy, paired on the same {pair.n} test examples | | | {pair.difference:+.3f} "
                     f"[{pair.low:+.3f}, {pair.high:+.3f}], McNemar p = {pair.p_value:.3g} ({pair.b_only} old-only vs "
                     f"{pair.a_only} new-only correct) | McNemar 5% | {pair.reading()} |")
    vo, vn = verdict_name(old["verdict"]["status"]), verdict_name(new["verdict"]["status"])
    worse = VERDICT_RANK.get(vn, 1) > VERDICT_RANK.get(vo, 1)
    regressions += worse
    for check in ("accounting", "empirical"):
        so, sn = ((x["verdict"].get(check) or {}).get("status") for x in (old, new))
        if so or sn:
            lines.append(f"| {check} check | {f'`{so}`' if so else '—'} | {f'`{sn}`' if sn else '—'} | "
                         f"{'' if so == sn else 'changed'} | exact | |")
    lines.append(f"| verdict | `{vo}` | `{vn}` | | exact | {'**regressed**' if worse else ''} |")
    rows, mech_reg = mechanism_rows(old, new)
    return lines + rows + [""], regressions + mech_reg


def _checks(r: dict) -> dict[str, str]:
    return {c["check"]: c["status"] for e in r.get("mechanism_checks") or [] for c in e["checks"]}


def mechanism_rows(old: dict, new: dict) -> tuple[list[str], int]:
    """The probe's mechanism checks side by side (``—``: not in that report); a check that passed (or was not run)
    and now fails regresses."""
    a, b = _checks(old), _checks(new)
    if not a and not b:
        return [], 0
    lines, reg = [], 0
    for check in dict.fromkeys([*a, *b]):
        so, sn = a.get(check, "—"), b.get(check, "—")
        worse = sn == "fail" and so != "fail"
        reg += worse
        lines.append(f"| mechanism check `{check}` | {so} | {sn} | {'' if so == sn else 'changed'} | exact | "
                     f"{'**regressed**' if worse else ''} |")
    return lines, reg


def compare(old: dict, new: dict) -> tuple[str, int]:
    """(markdown, number of regressions)."""
    if old["kind"] == "comparison" and new["kind"] == "comparison":
        pairs = [(k, old["variants"][k], new["variants"][k]) for k in old["variants"] if k in new["variants"]]
        missing = sorted(set(old["variants"]) ^ set(new["variants"]))
    elif old["kind"] == "evaluation" and new["kind"] == "evaluation":
        pairs, missing = [(new["checkpoint"].get("variant") or "model", old, new)], []
    else:
        raise DpauditError("compare needs two reports of the same kind (evaluation or comparison)")
    pairs, missing = md_tree(pairs), md_tree(missing)  # every string of the reports escaped before the markdown
    out = ["# dpaudit compare", ""]
    total = 0
    for name, o, n in pairs:
        lines, reg = compare_one(o, n, name)
        out += lines
        total += reg
    if missing:
        out.append(f"Variants in only one report: {', '.join(missing)}")
    out.insert(2, f"**{total} regression(s)**, each by the test its row names (exact: a deterministic value moved the "
                  "wrong way; 95% intervals, McNemar 5%, Newcombe 95%: shown beyond chance; none: shown, never "
                  "flagged).\n")
    return "\n".join(out) + "\n", total
