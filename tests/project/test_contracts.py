"""Privacy card, canary manifest and config: round trips and errors that name the field."""

import json
from pathlib import Path

import pytest

from dpaudit.accounting import SubsampledGaussian
from dpaudit.canaries import manifest as canaries
from dpaudit.claim import card
from dpaudit.errors import DpauditError
from dpaudit.run import config


def _card_dict():
    return card.PrivacyCard(claim=card.Claim(epsilon=3.0, delta=1e-5), events=[SubsampledGaussian(0.01, 1.0, 100)],
                            clipping_norm=1.0, expected_batch_size=10, dataset_size=1000).to_dict()


def test_card_round_trip():
    d = _card_dict()
    c = card.card_from_dict(d)
    assert c.to_dict() == d
    assert c.claim.epsilon == 3.0 and c.events[0].noise_multiplier == 1.0


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.pop("claim"), "'claim' is missing"),
    (lambda d: d["claim"].pop("delta"), "'delta' is missing"),
    (lambda d: d["claim"].update(epsilon=-1), "claim.epsilon"),
    (lambda d: d["claim"].update(delta=2.0), "claim.delta"),
    (lambda d: d["mechanism"]["events"][0].pop("noise_multiplier"), "noise_multiplier"),
    (lambda d: d["mechanism"]["events"][0].update(type="laplace_magic"), "unknown privacy event"),
    (lambda d: d.update(schema_version=99), "schema_version"),
    (lambda d: d["mechanism"].update(events=[]), "mechanism.events"),
])
def test_card_errors_name_the_field(mutate, needle):
    d = _card_dict()
    mutate(d)
    with pytest.raises(DpauditError, match=needle):
        card.card_from_dict(d)


def test_card_file_errors(tmp_path):
    with pytest.raises(DpauditError, match="not found"):
        card.load_card(tmp_path / "nope.json")
    with pytest.raises(DpauditError, match="is a folder, not a file"):  # every JSON reader: dpaudit.io.read_json
        card.load_card(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DpauditError, match="not valid JSON"):
        card.load_card(tmp_path / "bad.json")


def test_canaries_regenerate_and_balance():
    plan = canaries.CanaryPlan(m=400, repetitions=3, seed=5)
    man = canaries.generate(plan)
    assert len({c.secret for c in man.canaries}) == 400
    assert 150 < len(man.inserted) < 250  # S_i = +-1 with probability 1/2
    assert len(man.training_texts()) == 3 * len(man.inserted)
    assert all(c.text == f"My account number is {c.secret}." for c in man.canaries)
    back = canaries.manifest_from_dict(json.loads(json.dumps(man.to_dict())))
    assert canaries.regenerate(back)
    refs = man.reference_secrets(1000)
    assert not set(refs) & {c.secret for c in man.canaries}
    assert len(set(refs)) == 1000 and all(len(r) == 6 and r.isdigit() for r in refs)
    assert man.to_dict()["audit_plan"]["k_pos"] + man.to_dict()["audit_plan"]["k_neg"] == 200


def test_manifest_errors():
    d = canaries.generate(canaries.CanaryPlan(m=10)).to_dict()
    d["canaries"][0]["sign"] = 1 if not d["canaries"][0]["inserted"] else -1
    with pytest.raises(DpauditError, match="inconsistent"):
        canaries.manifest_from_dict(d)
    d = canaries.generate(canaries.CanaryPlan(m=10)).to_dict()
    del d["space"]
    with pytest.raises(DpauditError, match="space"):
        canaries.manifest_from_dict(d)


def test_config_parse_and_errors(tmp_path):
    cfg = config.parse({"train": {"epochs": 2}, "variants": [{"name": "a", "target_epsilon": float("inf")},
                                                             {"name": "b", "target_epsilon": 3.0}]})
    assert [v.name for v in cfg.variants] == ["a", "b"]
    assert not cfg.variants[0].trainer.engine.private and cfg.variants[1].trainer.engine.private
    with pytest.raises(DpauditError, match="unknown key 'train.epoch'"):
        config.parse({"train": {"epoch": 2}})
    with pytest.raises(DpauditError, match="unknown config section"):
        config.parse({"trian": {}})
    with pytest.raises(DpauditError, match="target_epsilon must be > 0"):
        config.parse({"variants": [{"name": "x", "target_epsilon": 0.0}]})
    with pytest.raises(DpauditError, match="delta"):
        config.parse({"train": {"delta": 1.5}})
    with pytest.raises(DpauditError, match="not found"):
        config.load(tmp_path / "missing.toml")


def test_the_cycle_check_finds_a_circle_and_the_package_has_none(tmp_path, monkeypatch):
    """make lint's .ci/check_cycles.py: a planted circle (even through an import inside a function) is found;
    dpaudit itself (as checked in place here; make lint checks the installed layout) has none."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_cycles", Path(__file__).resolve().parents[2] / ".ci" /
                                                  "check_cycles.py")
    cc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cc)
    pkg = tmp_path / "circlepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circlepkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from circlepkg import a\n    return a\n")
    (pkg / "c.py").write_text("from circlepkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cc.cycles("circlepkg") == [["circlepkg.a", "circlepkg.b"]]
    assert cc.cycles("dpaudit") == []


def test_no_package_module_grows_past_300_lines_without_saying_why():
    """docs/architecture.md: small modules with one job; a module over ~300 lines states its reason in its
    docstring ("Over 300 lines" / "over 300 lines"), where a reader opening it sees it."""
    import ast

    root = Path(__file__).resolve().parents[2]
    silent = []
    for f in sorted([*(root / "dpaudit").rglob("*.py"), *(root / "trainers").rglob("*.py"),
                     *(root / "attacks").rglob("*.py"), *(root / "tasks").rglob("*.py")]):
        text = f.read_text()
        if text.count("\n") <= 320:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "300 lines" not in doc:
            silent.append(f"{f.relative_to(root)} ({text.count(chr(10))} lines)")
    assert not silent, f"modules over 300 lines that do not say why: {silent}"


def _parameter_counts(root: Path):
    """(count, file, function, has a stated reason) for every function of the packages, self and cls not counted; a
    command-line command (a click command: one parameter per option, which click passes by name) states its reason
    by being one, any other in its docstring ("Over 8 parameters: ...")."""
    import ast

    for f in sorted(p for d in ("dpaudit", "trainers", "attacks", "tasks") for p in (root / d).rglob("*.py")):
        tree = ast.parse(f.read_text())
        class_doc = {id(m): ast.get_docstring(c) or "" for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                     for m in c.body}  # a constructor may say it in its class's docstring
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
            n = len(names) - (1 if names and names[0] in ("self", "cls") else 0)
            command = any("click" in ast.unparse(d) or ".command(" in ast.unparse(d) for d in node.decorator_list)
            said = "Over 8 parameters" in (ast.get_docstring(node) or "") + class_doc.get(id(node), "")
            yield n, f.relative_to(root), node.name, command or said


def test_no_function_takes_more_than_8_parameters_without_saying_why():
    """Issue wave 5 · 0/5: typed values, not long signatures; a function over 8 parameters states why (a public call
    whose keyword options mirror a command's, a click command), where a reader opening it sees it."""
    root = Path(__file__).resolve().parents[2]
    silent = [f"{f}:{name} ({n})" for n, f, name, ok in _parameter_counts(root) if n > 8 and not ok]
    assert not silent, f"functions over 8 parameters that do not say why: {silent}"


def test_every_public_function_has_google_style_sections():
    """The public API's functions (dpaudit.api's __all__ and the auditor's) state their arguments, and what they
    return, in Google style (Opacus' and dp_accounting's habit): a newcomer reads them in help() or an IDE."""
    import inspect

    import dpaudit.api as api
    import dpaudit.audit.auditor as auditor

    missing = []
    for mod in (api, auditor):
        names = getattr(mod, "__all__", None) or [n for n in vars(mod) if not n.startswith("_")]
        for n in names:
            f = getattr(mod, n)
            if not inspect.isfunction(f) or not f.__module__.startswith("dpaudit"):
                continue
            doc = inspect.getdoc(f) or ""
            if inspect.signature(f).parameters and "Args:" not in doc:
                missing.append(f"{mod.__name__}.{n}: no Args section")
            returns = inspect.signature(f).return_annotation
            if returns not in (None, "None", inspect.Signature.empty) and "Returns:" not in doc:
                missing.append(f"{mod.__name__}.{n}: no Returns section")
    assert not missing, missing
