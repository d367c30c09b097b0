"""The lighter installs, simulated in fresh processes whose heavier packages cannot be imported: the gate's
(`pip install dpaudit`: NumPy, no SciPy, no dp_accounting, no torch) answers check, compare, table and model-card and refuses
account and audit naming [audit]; [audit] (+ SciPy, dp_accounting; no torch, no Opacus) answers those too, Opacus'
accountants saying "not applicable" with the extra to install; the commands of the full install refuse in one line
(exit 2, nothing written). .ci/wheel_check.sh does the same from the built wheel in real venvs."""

import json
import os
import subprocess
import sys
from pathlib import Path

from dpaudit.install_hint import pip_command

ROOT = Path(__file__).resolve().parents[2]
CARD = ROOT / "reports" / "canary_designs" / "new_token" / "dp-eps8" / "checkpoint" / "privacy_card.json"
DEMO = ROOT / "reports" / "demo" / "dp-eps8" / "report" / "report.json"
TRAIN = ("torch", "transformers", "opacus", "peft", "datasets", "sklearn", "matplotlib", "safetensors", "tokenizers")
BLOCKED = {"audit": TRAIN, "gate": TRAIN + ("scipy", "dp_accounting")}


def light(*args, cwd=None, install="audit"):
    """``dpaudit ARGS`` in a process where the packages ``install`` leaves out are not importable."""
    blocked = BLOCKED[install]
    code = ("import sys\n"
            "class Absent:  # as if not installed: importing one of these raises ModuleNotFoundError\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            f"        if name.split('.')[0] in {blocked!r}:\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Absent())\n"
            "from dpaudit.cli import main\n"
            f"rc = main({list(map(str, args))!r})\n"
            f"assert not any(n in sys.modules for n in {blocked!r})\n"
            "sys.exit(rc)\n")
    env = {**os.environ, "DPAUDIT_ACCOUNTING_CACHE": "0"}  # a value the full install cached is no light answer
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd or ROOT, env=env)


def test_the_gates_install_checks_compares_tabulates_and_writes_the_model_card_without_scipy(tmp_path):
    r = light("check", DEMO, "--policy", ROOT / "configs" / "policy.toml", install="gate")
    assert r.returncode == 0 and "satisfies the policy" in r.stdout, r.stderr
    r = light("compare", ROOT / "reports/demo/non-private/report/report.json", DEMO, install="gate")
    assert r.returncode == 0 and "accuracy" in r.stdout, r.stderr
    r = light("table", ROOT / "reports" / "demo", "--columns", "variant,accuracy,claimed,prv,interval,verdict",
              "--differences", "dp-eps8:non-private", install="gate")
    assert r.returncode == 0 and "dp-eps8" in r.stdout, r.stderr
    r = light("model-card", DEMO, "--to", tmp_path / "README.md", install="gate")
    assert r.returncode == 0 and "dpaudit:begin" in (tmp_path / "README.md").read_text(), r.stderr


def test_the_gates_install_names_the_extra_for_account_and_audit(tmp_path):
    for args in (("account", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"),
                 ("account", "--card", CARD),
                 ("audit", "plan", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--canaries", "1000"),
                 ("audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "95")):
        r = light(*args, install="gate", cwd=tmp_path)
        assert r.returncode == 2 and r.stdout == "", (args, r.stdout, r.stderr)
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("error: this command needs ") and pip_command("audit") in line, line
    r = light("evaluate", CARD.parent, "--out", tmp_path / "out", install="gate")
    assert r.returncode == 2 and pip_command("train") in r.stderr and not (tmp_path / "out").exists()
    assert list(tmp_path.iterdir()) == []


def test_account_card_without_opacus_uses_the_other_accountants_and_names_the_extra(tmp_path, monkeypatch):
    r = light("account", "--card", CARD, "--json", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    out = json.loads(r.stdout)
    skipped = out["not_applicable"]
    assert {"rdp", "prv"} <= set(skipped) and all(pip_command("train") in skipped[n] for n in ("rdp", "prv")), skipped
    done = {x["accountant"]: x for x in out["results"]}
    assert set(done) == {"pld", "dpa_rdp"}
    # the same numbers as the full install's PLD and dp_accounting RDP (this process has Opacus)
    from dpaudit import accounting
    from dpaudit.claim.card import load_card

    card = load_card(CARD)
    full, _ = accounting.intervals(card.events, card.claim.delta, card.claim.neighbouring, card.dataset_size,
                                   accountants=["pld", "dpa_rdp"])
    for res in full:
        assert abs(done[res.accountant]["epsilon"] - res.epsilon) < 1e-9
    assert out["verdict"] == "verified" and r.returncode == 0


def test_account_opacus_accountant_asked_by_name_is_not_applicable():
    args = ("--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--accountants", "rdp,pld")
    r = light("account", "--sigma", "1", *args)
    assert r.returncode == 0, r.stderr
    assert "pld      ε = " in r.stdout and "rdp      not applicable: rdp is Opacus' accountant" in r.stdout, r.stdout
    # calibration too: never another accountant's sigma under rdp's name
    r = light("account", "--target-epsilon", "3", *args)
    assert r.returncode == 0, r.stderr
    assert "pld      σ = 0.81" in r.stdout and "rdp      σ" not in r.stdout and "rdp      not applicable" in r.stdout
    r = light("account", "--sigma", "1", *args[:-1], "prv")
    assert r.returncode == 2 and pip_command("train") in r.stderr, r.stderr


def test_gate_commands_answer_without_the_training_stack(tmp_path):
    assert light("check", DEMO).returncode == 0
    assert light("check", DEMO, "--policy", ROOT / "configs" / "policy.toml").returncode == 0
    assert light("compare", ROOT / "reports/demo/non-private/report/report.json", DEMO).returncode == 0
    r = light("table", ROOT / "reports" / "demo", "--columns", "variant,claimed,prv,interval,verdict")
    assert r.returncode == 0 and "dp-eps8" in r.stdout, r.stderr
    r = light("audit", "plan", "--sigma", "1", "--sample-rate", "0.01", "--steps", "100", "--canaries", "1000")
    assert r.returncode == 0, r.stderr
    assert light("audit", "one-run", "--canaries", "1000", "--guesses", "100", "--correct", "95").returncode == 0
    import numpy as np

    rng = np.random.default_rng(0)
    signs = rng.choice([-1, 1], size=400)
    (tmp_path / "s.json").write_text(json.dumps({"scores": (rng.normal(size=400) + (signs > 0)).tolist(),
                                                 "inserted": (signs > 0).tolist()}))
    for strategy in ("fixed", "held-out", "median"):
        r = light("audit", "scores", tmp_path / "s.json", "--strategy", strategy, "--delta", "1e-5")
        assert r.returncode == 0 and "ε ≥ " in r.stdout and "AUC" in r.stdout, r.stderr


def test_commands_of_the_full_install_refuse_in_one_line(tmp_path):
    ck = CARD.parent
    r = light("evaluate", ck, "--out", tmp_path / "out")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: this command needs ") and pip_command("train") in line, line
    assert not (tmp_path / "out").exists()


def test_the_card_command_accounts_its_claim_where_an_accountant_is_installed(tmp_path):
    args = ("card", "--epsilon", "8", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "3000")
    r = light(*args, "--sigma", "0.6", "--out", tmp_path / "under.json")  # spends ε ≈ 12
    assert r.returncode == 2 and "under-claim" in r.stderr and not (tmp_path / "under.json").exists(), r.stderr
    r = light(*args, "--sigma", "0.7", "--out", tmp_path / "card.json")
    assert r.returncode == 0 and "accounting verified" in r.stdout, r.stderr
    r = light(*args, "--sigma", "0.6", "--out", tmp_path / "gate.json", install="gate")  # nothing to account with
    assert r.returncode == 0 and "NOT accounted" in r.stdout and (tmp_path / "gate.json").is_file(), r.stderr
