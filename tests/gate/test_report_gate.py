"""report.json schema, determinism, the markdown's plots, `dpaudit check` rules and `dpaudit compare`."""

import copy
import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

import dpaudit
from dpaudit.cli import main
from dpaudit.gate import policy
from dpaudit.gate.compare import compare


def _load(p):
    return json.loads(p.read_text())


@pytest.fixture(scope="module")
def schema():
    return json.loads(resources.files("dpaudit").joinpath("schemas/report.schema.json").read_text())


def test_reports_validate_against_schema(run_dir, schema):
    jsonschema.validate(_load(run_dir / "report.json"), schema)
    for v in ("non-private", "dp"):
        jsonschema.validate(_load(run_dir / v / "report" / "report.json"), schema)
    broken = _load(run_dir / "dp" / "report" / "report.json")
    del broken["verdict"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_markdown_sections_and_plots_exist(run_dir):
    for v in ("non-private", "dp"):
        folder = run_dir / v / "report"
        md = (folder / "REPORT.md").read_text()
        order = ["**Verdict:", "## Bounds", "## Accounting", "## Task metrics", "## Attacks", "## Canaries", "## Reproducibility",
                 "## Limitations"]
        pos = [md.index(s) for s in order]
        assert pos == sorted(pos)
        images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
        assert images and all((folder / i).is_file() and (folder / i).stat().st_size > 1000 for i in images)
        assert "ceiling" in md and "confidence" in md


def _strip(r):
    r = copy.deepcopy(r)
    for path in (("generated_at",), ("timings",), ("checkpoint", "path"), ("reproducibility", "command"),
                 ("reproducibility", "train_result", "seconds")):
        d = r
        for k in path[:-1]:
            d = d.get(k) or {}
        d.pop(path[-1], None)
    return r


def test_same_config_same_report(run_dir, tmp_path):
    cfg = run_dir.parent / "cfg.toml"
    assert main(["run", str(cfg), "--out", str(tmp_path / "again"), "--quiet"]) == 0
    for v in ("non-private", "dp"):
        a = _strip(_load(run_dir / v / "report" / "report.json"))
        b = _strip(_load(tmp_path / "again" / v / "report" / "report.json"))
        diff = [k for k in a if json.dumps(a[k], sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]
        assert not diff, (v, diff)


def _policy(tmp_path, text, name="policy.toml"):
    p = tmp_path / name
    p.write_text("[rules]\n" + text)
    return str(p)


def test_check_passes_dp_and_fails_nonprivate(run_dir, tmp_path, capsys):
    dp = str(run_dir / "dp" / "report" / "report.json")
    assert main(["check", dp, "--policy", "configs/policy.toml"]) == 0
    nonp = str(run_dir / "non-private" / "report" / "report.json")
    assert main(["check", nonp, "--policy", "configs/policy.toml"]) == 1
    out = capsys.readouterr().out
    assert "no privacy claim" in out and all(line.startswith(("FAIL", "ok", "  ")) for line in out.strip().splitlines())


@pytest.mark.parametrize("rule,mutate,needle", [
    ("no_empirical_above_claim = true", lambda r: r["empirical"][0].update(epsilon_lb=9.0, delta_kind="claimed"),
     "exceeds the claimed"),
    ("accounting_tolerance = 0.02", lambda r: [a.update(lower=2 * a["epsilon"]) for a in r["accounting"]["results"]],
     "accounting check 'under-claim'"),
    ("accounting = ['verified']", lambda r: [a.update(epsilon=9.0) for a in r["accounting"]["results"]],
     "accounting check 'unverifiable'"),
    ("accounting_reference = 'largest'", lambda r: r["accounting"].update(reaccounted_epsilon=9.0), "re-accounted"),
    ("empirical = ['consistent']", lambda r: [e.update(ceiling=0.1) for e in r["empirical"]],
     "empirical check 'underpowered'"),
    ("max_claimed_epsilon = 0.1", lambda r: None, "budget"),
    ("min_accuracy = 0.99", lambda r: None, "below the floor"),
    ("max_exposure = 0.5", lambda r: None, "exposure"),
    ("allowed_verdicts = ['consistent']", lambda r: r["verdict"].update(status="violated"), "not allowed"),
    ("no_noise_shortfall = true", lambda r: r.update(noise_checks=[{
        "attack": "whitebox_gradient", "kind": "dirac", "values": 61000, "steps": 61, "m": 1000,
        "noise_multiplier": 0.77, "rms": 0.70, "ratio": 0.91, "upper": 0.71, "confidence": 0.95,
        "status": "below the card"}]), "below the card's sigma"),
])
def test_each_rule_fails_when_it_should(run_dir, tmp_path, capsys, rule, mutate, needle):
    base = _load(run_dir / "dp" / "report" / "report.json")
    pol = _policy(tmp_path, "require_claim = true\n" + rule + "\n")
    f = tmp_path / "r.json"
    f.write_text(json.dumps(base))
    p = policy.load_policy(tmp_path / "policy.toml")
    relaxed = policy.Policy(no_empirical_above_claim=False, accounting=(), empirical=(), allowed_verdicts=())
    assert policy.check(base, relaxed) == []
    r = copy.deepcopy(base)
    mutate(r)
    f.write_text(json.dumps(r))
    assert any(needle in x for x in policy.check(r, p))
    assert main(["check", str(f), "--policy", pol]) == 1
    assert needle in capsys.readouterr().out


def test_check_bad_input(run_dir, tmp_path, capsys):
    good = run_dir / "dp" / "report" / "report.json"
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{oops")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**_load(good), "schema_version": 2}))
    cases = [([str(bad_json)], "not valid JSON"), ([str(other)], "schema_version"),
             ([str(tmp_path / "missing.json")], "not found"),
             ([str(good), "--policy", _policy(tmp_path, "max_epsilon = 3\n", "p1.toml")], "unknown policy key 'rules.max_epsilon'"),
             ([str(good), "--policy", _policy(tmp_path, "min_accuracy = 'high'\n", "p2.toml")], "min_accuracy")]
    for args, needle in cases:
        assert main(["check", *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1


def test_compare_flags_regressions(run_dir, capsys):
    dp = _load(run_dir / "dp" / "report" / "report.json")
    nonp = _load(run_dir / "non-private" / "report" / "report.json")
    md, n = compare(dp, nonp)  # going from the DP model to the non-private one is a privacy regression
    assert n >= 2 and "**regressed**" in md and "empirical ε lower bound" in md
    md, n = compare(dp, dp)
    assert n == 0
    a, b = str(run_dir / "dp" / "report" / "report.json"), str(run_dir / "non-private" / "report" / "report.json")
    assert main(["compare", a, b, "--fail-on-regression"]) == 1
    assert main(["compare", a, a, "--fail-on-regression"]) == 0


def test_compare_shows_the_accounting_interval_that_decides_not_a_loose_upper_bound():
    """The demo's DP report: PLD proves ε <= 7.975 while RDP's loose upper value is 9.56; compare shows the former
    (and the largest lower value), never the loose one as "the" re-accounted epsilon; a wider interval regresses."""
    demo = _load(Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "report" / "report.json")
    md, n = compare(demo, demo)
    assert n == 0 and "9.557" not in md and "re-accounted" not in md
    row = next(ln for ln in md.splitlines() if "true ε at most" in ln)
    assert "7.975" in row, row
    worse = json.loads(json.dumps(demo))
    worse["accounting"]["certified_epsilon"] = 8.4
    md, n = compare(demo, worse)
    assert n >= 1 and "**regressed**" in next(ln for ln in md.splitlines() if "true ε at most" in ln)


def test_compare_never_flags_the_empirical_rows_of_two_different_audits():
    """A planted-canary report against a post-hoc one (a hostile round, 2026-12-01): the ceiling moved and was
    flagged as an `exact` regression, as if one test had been read twice. The rows are shown, the note says why
    none is flagged; the claim, accounting and verdict rows keep their tests."""
    demo = _load(Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "report" / "report.json")
    other = json.loads(json.dumps(demo))
    other["posthoc"] = {"kind": "stated random split", "assumption": "a fair coin", "sources": {}, "dropped": {}}
    other["verdict"]["empirical"]["ceiling"] = demo["verdict"]["empirical"]["ceiling"] / 2
    md, n = compare(demo, other)
    assert n == 0 and "compare different audits (old: planted canaries, new: a post-hoc audit" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| audit ceiling"))
    assert "| none |" in row and "regressed" not in row
    md, n = compare(demo, json.loads(json.dumps(demo)) | {"verdict": other["verdict"]})  # the same audit: flagged
    assert n >= 1 and "**regressed**" in next(ln for ln in md.splitlines() if ln.startswith("| audit ceiling"))


def test_one_word_one_meaning_older_reports_and_policies_keep_theirs(tmp_path, capsys):
    """The headline "accounting verified, audit could not reach the claim" is `underpowered` (the empirical check's
    own word, and the empirical check's `consistent` the headline's). An older report's headline `not-refuted` and an
    older policy's allowed `not-refuted` are read as `underpowered`, an older policy's empirical `not-refuted` as
    `consistent`: the gate and compare give what they gave."""
    from dpaudit import options
    from dpaudit.audit.rows import TestRow
    from dpaudit.claim.verdict import empirical

    assert "not-refuted" not in options.VERDICTS and "underpowered" in options.VERDICTS
    assert set(options.EMPIRICAL_STATUSES) - {"no-power"} <= set(options.VERDICTS)
    assert "not-refuted" not in options.EMPIRICAL_STATUSES
    row = TestRow.from_dict({"epsilon_lb": 0.5, "family_confidence": 0.95, "ceiling": 3.0, "delta_kind": "claimed"})
    assert empirical(8.0, row, 3.0).status == "underpowered"
    demo = Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
    old = json.loads(demo.read_text())
    old["verdict"]["status"] = "not-refuted"  # as written before the rename
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(old))
    new = json.loads(demo.read_text())
    new["verdict"]["status"] = "underpowered"
    new_path = tmp_path / "new.json"
    new_path.write_text(json.dumps(new))
    old_policy = _policy(tmp_path, "allowed_verdicts = ['consistent', 'not-refuted']\n", "old.toml")
    strict = _policy(tmp_path, "allowed_verdicts = ['consistent']\n", "strict.toml")
    for path in (old_path, new_path):
        assert main(["check", str(path)]) == 0
        assert main(["check", str(path), "--policy", old_policy]) == 0
        assert main(["check", str(path), "--policy", strict]) == 1
        assert "verdict 'underpowered' is not allowed" in capsys.readouterr().out
    md, n = compare(policy.load_report(old_path), policy.load_report(new_path))
    assert n == 0 and "not-refuted" not in md.split("### ")[0]
    old_empirical = _policy(tmp_path, "empirical = ['not-refuted']\n", "old-empirical.toml")
    assert policy.load_policy(Path(old_empirical)).empirical == ("consistent",)


def test_the_gate_summary_and_run_output_state_the_strength_at_the_claim(capsys):
    """What a mechanism exactly at the claim shows with these canaries, beside the ceiling, in the passing gate's
    line (so a weak test never reads as a strong one there either)."""
    demo = Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
    assert main(["check", str(demo)]) == 0
    out = capsys.readouterr().out
    limit = max(x["epsilon_lb"] for x in json.loads(demo.read_text())["audit_limits"])
    assert f"at the claim these canaries show {limit:.2g} for a mechanism exactly at it" in out, out


def test_every_metric_and_exposure_key_a_report_holds_is_typed():
    """The readers of metrics and exposure (compare, the gate's accuracy and exposure rules, table, REPORT.md) read
    these keys as numbers: an untyped one let a string through to `compare` (a hostile round, 2026-11-29: exit 3).
    Every key the committed reports hold there, and each exposure canary's, is declared with a type."""
    schema = json.loads((Path(dpaudit.__file__).parent / "schemas" / "report.schema.json").read_text())
    props = schema["$defs"]["evaluation"]["properties"]
    declared = {"metrics": props["metrics"]["properties"], "exposure": props["exposure"]["properties"],
                "canary": props["exposure"]["properties"]["canaries"]["items"]["properties"]}
    assert all(set(v) & {"type", "$ref", "oneOf"} for d in declared.values() for v in d.values())
    missing = set()
    for f in (Path(__file__).resolve().parents[2] / "reports").rglob("report.json"):
        r = json.loads(f.read_text())
        if r.get("kind") != "evaluation":
            continue
        missing |= {("metrics", k) for k in r["metrics"] if k not in declared["metrics"]}
        missing |= {("exposure", k) for k in r["exposure"] if k not in declared["exposure"]}
        missing |= {("canary", k) for c in r["exposure"].get("canaries", []) for k in c if k not in declared["canary"]}
    assert missing == set()


@pytest.mark.parametrize("where,value", [(("metrics", "accuracy"), "0.9"), (("exposure", "mean_inserted"), "<b>x</b>"),
                                         (("metrics", "correct"), 1.5)])
def test_compare_refuses_a_metric_of_the_wrong_type_in_one_line(tmp_path, capsys, where, value):
    old = Path(__file__).resolve().parents[2] / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
    r = json.loads(old.read_text())
    r[where[0]][where[1]] = value
    (tmp_path / "r.json").write_text(json.dumps(r))
    assert main(["compare", str(old), str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".".join(where) in err.replace("/", ".").replace("'", ""), err


def test_every_key_the_schema_requires_has_a_type():
    """A required key without a declared type let a report through whose value the gate then read as a number
    (a hostile round, 2026-11-29: exit 3 on a null, a string or a list in eight such keys)."""
    schema = json.loads((Path(dpaudit.__file__).parent / "schemas" / "report.schema.json").read_text())
    untyped = []

    def walk(node, where, outer=()):
        if isinstance(node, dict):
            props = set(node.get("properties", {})) | set(outer)  # an anyOf branch's keys are typed beside it
            untyped.extend(f"{where}/{k}" for k in node.get("required", []) if k not in props)
            for k, v in node.items():
                walk(v, f"{where}/{k}", props if k in ("anyOf", "oneOf") else ())
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}/{i}", outer)

    walk(schema, "")
    assert untyped == []
