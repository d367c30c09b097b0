"""The package as it ships: every subpackage is found (none listed by hand), the tests import the checkout,
and the dependencies the code imports are declared (the wheel is built and run by .ci/wheel_check.sh)."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _setup():
    spec = importlib.util.spec_from_file_location("dpaudit_setup", ROOT / "setup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # setup() runs only as __main__
    return mod


def test_every_package_folder_is_found():
    setup = _setup()
    found = set(setup.packages())
    for name, folder in setup.ROOTS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            assert ".".join((name, *rel.parts)) in found, init


def test_tests_import_the_checkout():
    import dpaudit
    import dpaudit.tasks
    import dpaudit.trainers

    assert Path(dpaudit.__file__).resolve().parent == ROOT / "dpaudit"
    assert Path(dpaudit.trainers.__file__).resolve().parent == ROOT / "trainers"
    assert Path(dpaudit.tasks.__file__).resolve().parent == ROOT / "tasks"


def test_third_party_imports_are_declared():
    """Every third-party module the package imports is a declared dependency (pins stay in requirements.txt), or
    an offline asset package of requirements-assets.txt (data, installed beside it without its dependencies)."""
    import ast
    import sys

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["train"]  # the gate's install and the fullest
    declared = {re.split(r"[<>=!~ ]", d, maxsplit=1)[0].lower().replace("-", "_") for d in deps}
    assets = {ln.split("==")[0].strip().lower().replace("-", "_") for ln in
              (ROOT / "requirements-assets.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    distribution = {"sklearn": "scikit_learn", "yaml": "pyyaml"}
    used = set()
    for folder in ("dpaudit", "trainers", "attacks", "tasks"):
        for f in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    used |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    used.add(node.module.split(".")[0])
    third = used - set(sys.stdlib_module_names) - {"dpaudit", "__future__"}
    missing = sorted(m for m in third if distribution.get(m, m).lower() not in declared | assets)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_package_asks_for_ranges_that_the_pins_satisfy():
    """pip install dpaudit beside a user's stack keeps their torch 2.x: the package declares ranges (no exact pin),
    and requirements.txt's pins (what the suite runs on) lie inside them."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {Requirement(d).name.lower(): Requirement(d) for d in
            project["dependencies"] + project["optional-dependencies"]["train"]}
    pinned = [no for no, r in deps.items() if any(s.operator in ("==", "===") for s in r.specifier)]
    assert not pinned, f"exact pins belong in requirements.txt, not the package: {pinned}"
    for name in ("torch", "transformers", "peft", "opacus"):
        assert any(s.operator == "<" for s in deps[name].specifier), f"{name}: an upper bound keeps a major out"
    for ln in (ROOT / "requirements.txt").read_text().splitlines():
        if "==" in ln and not ln.startswith("#"):
            name, version = (x.strip() for x in ln.split("#")[0].split("=="))
            if name.lower() in deps:
                assert deps[name.lower()].specifier.contains(version), (name, version, str(deps[name.lower()]))
    assert deps["torch"].specifier.contains("2.11.0") and deps["torch"].specifier.contains("2.15.0")


def test_the_checkout_stays_light():
    """A newcomer's clone: the tracked files weigh under 80 MB (run folders keep cards, manifests, run records,
    reports and plots; no weights, tokenizer copies, per-step arrays or byte-identical manifests: .gitignore)."""
    import subprocess

    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:  # an unpacked sdist: no checkout to weigh
        pytest.skip("not a git checkout")
    files = [ROOT / f for f in out.stdout.split("\0") if f]
    total = sum(f.stat().st_size for f in files if f.is_file())
    assert total < 80e6, f"the tracked files weigh {total / 1e6:.1f} MB (limit 80 MB)"


def test_committed_reports_name_no_path_of_the_machine_that_made_them():
    """Reports speak of the project: their paths are relative to the repository (a clone elsewhere reads them as
    they are). Checkpoint folders are left out: their files are the trainer's as written, covered by their hash
    (PEFT's adapter_config.json names the base model's cache path)."""
    import subprocess

    out = subprocess.run(["git", "ls-files", "-z", "reports"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    machine = re.compile(r"(?<![\w.])/(?:work|root|home|tmp|Users)/")
    bad = [f for f in out.stdout.split("\0") if f and "/checkpoint/" not in f and f.endswith((".json", ".md"))
           and machine.search((ROOT / f).read_text(errors="replace"))]
    assert not bad, f"{len(bad)} committed reports name a machine path, e.g. {bad[:3]}"


def test_the_three_installs_need_only_their_own_dependencies():
    """`pip install dpaudit` (the CI gate: check, compare, table, model-card) brings NumPy, click, tqdm, jsonschema
    and PyYAML (the model card's front matter); [audit]
    adds SciPy and dp_accounting (account, audit); [train] holds both and the training stack
    (tests/cli/test_light_install.py runs each install's commands without the packages of the next)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(deps):
        return {re.split(r"[<>=!~ ]", d, maxsplit=1)[0].lower() for d in deps}

    extras = project["optional-dependencies"]
    assert names(project["dependencies"]) == {"numpy", "click", "tqdm", "jsonschema", "pyyaml"}
    assert names(extras["audit"]) == {"scipy", "dp-accounting"}
    train = names(extras["train"])
    assert names(extras["audit"]) <= train and {"torch", "transformers", "peft", "opacus", "datasets"} <= train
