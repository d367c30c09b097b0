"""Render reports: ``report.json`` (the CI contract), ``REPORT.md`` and PNG plots beside it.

report.json stability rules: ``schema_version`` is bumped on any incompatible change; keys are never
removed or re-purposed; new keys are optional. Epsilon values that are infinite are written as the
string ``"inf"``; ``null`` means "not applicable" (e.g. no claim).

Writing is atomic per file set: everything goes to a temporary folder first, so a failure leaves no
partial report behind.
"""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit.folders import atomic_folder
from dpaudit.io import jsonable
from dpaudit.markup import md, md_tree, percent
from dpaudit.options import TASK_METRICS, verdict_name
from dpaudit.report import plots
from dpaudit.report.build import SCHEMA_VERSION
from dpaudit.report.markdown import LIMITATIONS, fmt_eps, headline, render_markdown
from dpaudit.report.plots import clipping_summary


def _redact_json(r: dict) -> dict:
    r = json.loads(json.dumps(r))
    for c in (r.get("exposure") or {}).get("canaries", []):
        c["secret"] = "REDACTED"
    return r


def write(report: dict, out: Path, redact: bool = False) -> Path:
    """Write report.json, REPORT.md and plots into ``out`` (all or nothing: :class:`dpaudit.folders.atomic_folder`);
    a plot an earlier report left there that this one does not draw is removed."""
    from dpaudit.io import REPORT_FILES

    with atomic_folder(out, owned=REPORT_FILES) as tmp:
        body = _redact_json(report) if redact else report
        (tmp / "report.json").write_text(json.dumps(jsonable(body), indent=1) + "\n")
        files = plots.draw(report, tmp)
        (tmp / "REPORT.md").write_text(render_markdown(report, files, redact))
    return Path(out)


def _task_metric(m: dict) -> str:
    if not m:
        return "—"
    base = f" (before fine-tuning {_task_metric(m['base_model'])})" if m.get("base_model") else ""
    pre = "validation " if m.get("split") == "validation" else ""  # never mistaken for a test number
    if "perplexity" in m:
        return f"{pre}perplexity {m['perplexity']:.2f}" + base
    if "accuracy" in m:
        const = f" (constant predictor {m['constant_predictor_accuracy']:.3f})" if "constant_predictor_accuracy" in m else ""
        return f"{pre}accuracy {m['accuracy']:.3f}{const}" + base
    return pre + (" / ".join(f"{k} {m[k]:.{1 if k != 'nist' and k != 'cider' else 2}f}" for k in TASK_METRICS[1:]
                       if k in m) or "—") + base


def _reaccounted(r: dict) -> str:
    """The accounting interval that decides: the tightest proof that the claim holds (verified ≤ x), or the
    accountants' proof of an under-claim (true ε ≥ x); never a loose upper bound shown as "the" ε."""
    if not r["claim"]["private"]:
        return "—"
    a = r["accounting"]
    status, cert, lo = a.get("status"), a.get("certified_epsilon"), a.get("lower_epsilon")
    if status == "verified" and cert is not None:
        return f"verified: ε ≤ {cert:.4g}"
    if lo is not None and lo > r["claim"]["epsilon"]:
        return f"{status}: true ε ≥ {lo:.4g}"
    if cert is not None:
        return f"{status}: ε ≤ {cert:.4g}"
    return f"{status}: no accountant" + (f" (true ε ≥ {lo:.3g})" if lo is not None else "")


def _clipped_cell(r: dict) -> str:
    c = clipping_summary(r)
    if not c.get("steps_observed"):
        return "—"
    return f"{c['mean_fraction_clipped']:.0%} at C = {c['clipping_norm']:g}"


# the comparison table's columns: (header, cell of one report); a column that is "—" for every variant is left out
_COLUMNS = [
    ("variant", None),
    ("verdict", lambda r: f"`{verdict_name(r['verdict']['status'])}`"),
    ("claimed ε", lambda r: fmt_eps(r["claim"]["epsilon"])),
    ("accounting (the interval that decides)", lambda r: _reaccounted(r)),
    ("empirical ε lower bound (best test, confidence, ceiling)", lambda r: (
        f"{r['empirical_best']['epsilon_lb']:.2f} ({r['empirical_best']['attack']}, "
        f"{percent(r['empirical_best']['family_confidence'])}, ceiling {r['empirical_best']['ceiling']:.2f})"
        if r.get("empirical_best") else "—")),
    ("LOSS AUC [95% CI]", lambda r: (lambda a: f"{a['auc']:.3f} [{a['auc_ci'][0]:.2f}, {a['auc_ci'][1]:.2f}]"
                                     if a else "—")(r["attacks"].get("loss"))),
    ("exposure AUC", lambda r: f"{r['attacks']['exposure']['auc']:.3f}" if "exposure" in r["attacks"] else "—"),
    ("white-box canary AUC", lambda r: (f"{r['attacks']['whitebox_gradient']['auc']:.3f}"
                                        if "whitebox_gradient" in r["attacks"] else "—")),
    ("mean exposure inserted / held out (bits)", lambda r: (
        f"{r['exposure']['mean_inserted']:.2f} / {r['exposure']['mean_held_out']:.2f}" if r.get("exposure") else "—")),
    ("units clipped per step (mean)", lambda r: _clipped_cell(r)),
    ("task metric", lambda r: _task_metric(r["metrics"])),
]


def _table(reports: dict[str, dict]) -> list[str]:
    """The comparison's table: one row per variant, without the columns no variant has a value for."""
    rows = {name: [f"[{name}]({name}/report/REPORT.md)", *(cell(r) for _, cell in _COLUMNS[1:])]
            for name, r in reports.items()}
    keep = [i for i in range(len(_COLUMNS)) if i == 0 or any(row[i] != "—" for row in rows.values())]
    lines = ["| " + " | ".join(_COLUMNS[i][0] for i in keep) + " |", "|" + "---|" * len(keep)]
    return lines + ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows.values()]


def write_comparison(reports: dict[str, dict], out: Path, command: str, config: dict, redact: bool = False) -> Path:
    """One report comparing the variants of a run (each keeps its own folder and report)."""
    with atomic_folder(out) as tmp:
        body = {"schema_version": SCHEMA_VERSION, "kind": "comparison", "command": command, "config": config,
                "variants": {k: (_redact_json(v) if redact else v) for k, v in reports.items()}}
        # compact: it repeats every variant's report (each indented in its own folder); indented, the run folders'
        # comparisons were a quarter of the checkout
        (tmp / "report.json").write_text(json.dumps(jsonable(body), separators=(",", ":")) + "\n")
        reports, command = md_tree(reports), md(command)  # the markdown below: every input string escaped
        L = ["# dpaudit run: claimed vs empirical privacy", "", f"Command: `{command}`", "", *_table(reports)]
        L += ["", "Verdicts:", ""]
        L += [f"- **{name}**: {headline(r)}" for name, r in reports.items()]
        first = next(iter(reports.values()))
        cp = first["canary_plan"]
        space = (f"secrets from a space of {cp['space_size']:,}" if cp.get("space_size") is not None
                 else "each secret made of its own new tokens")
        design = f"design `{cp['design']}`, " if cp.get("design") else ""
        white = sorted({e["m"] for r in reports.values() for e in r.get("empirical") or []
                        if e.get("attack") == "whitebox_gradient" and isinstance(e.get("m"), int)})
        white_line = (f" White-box gradient canaries (the probe's, in the training loop): m = "
                      f"{', '.join(f'{m:,}' for m in white)}." if white else "")
        L += ["", f"Text canaries: m = {cp['m']} ({cp['inserted']} inserted, each {cp['repetitions']}×), {design}{space}; "
              f"one-run guesses fixed before training: k+ = {cp['k_pos']}, k- = {cp['k_neg']}.{white_line}", "",
              "## Limitations", ""]
        L += [f"- {x}" for x in LIMITATIONS]
        (tmp / "REPORT.md").write_text("\n".join(L) + "\n")
    return Path(out)
