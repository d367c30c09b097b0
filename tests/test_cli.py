"""The command line: bad input gives one line, exit 2, no partial output; numeric commands agree with the library."""

import json

import pytest

from dpaudit.cli import main


def run_cli(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_one_run_json(capsys):
    code, out, _ = run_cli(["audit", "one-run", "--canaries", "1000", "--guesses", "1000", "--correct", "1000",
                            "--delta", "0", "--json"], capsys)
    assert code == 0
    assert json.loads(out)["epsilon_lb"] == pytest.approx(5.81, abs=0.005)


def test_account_json(capsys):
    code, out, _ = run_cli(["account", "--sigma", "1.0", "--sample-rate", "0.01", "--steps", "1000",
                            "--delta", "1e-5", "--json", "--accountants", "rdp,pld"], capsys)
    assert code == 0
    d = json.loads(out)
    assert d["pld"] == pytest.approx(1.83, abs=0.01) and d["rdp"] == pytest.approx(2.10, abs=0.01)


@pytest.mark.parametrize("args,needle", [
    (["account", "--sigma", "0", "--sample-rate", "0.01", "--steps", "10", "--delta", "1e-5"], "sigma"),
    (["account", "--sigma", "1", "--sample-rate", "1.5", "--steps", "10", "--delta", "1e-5"], "sample rate"),
    (["account", "--sigma", "1", "--sample-rate", "0.1", "--steps", "0", "--delta", "1e-5"], "steps"),
    (["account", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10", "--delta", "1"], "delta"),
    (["account", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10"], "--delta"),
    (["account", "--sigma", "1", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5",
      "--accountants", "moments"], "unknown accountant"),
    (["account", "--target-epsilon", "-1", "--sample-rate", "0.1", "--steps", "10", "--delta", "1e-5"], "target epsilon"),
    (["audit", "one-run", "--canaries", "10", "--guesses", "20", "--correct", "5"], "cannot exceed"),
    (["run", "does-not-exist.toml", "--out", "x"], "not found"),
])
def test_bad_input_exit_2(args, needle, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1


def test_evaluate_missing_checkpoint_writes_nothing(tmp_path, capsys):
    out = tmp_path / "report"
    code, _, err = run_cli(["evaluate", str(tmp_path / "nope"), "--out", str(out)], capsys)
    assert code == 2 and "not found" in err and not out.exists()


def test_config_errors_exit_2(tmp_path, capsys):
    bad = [("[train]\nepochz = 1\n", "unknown key 'train.epochz'"),
           ("[[variants]]\nname = 'x'\ntarget_epsilon = -1.0\n", "target_epsilon must be > 0"),
           ("[train]\ndelta = 0.0\n", "delta"),
           ("[task]\nsource = '%s'\n", "empty")]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for i, (text, needle) in enumerate(bad):
        p = tmp_path / f"c{i}.toml"
        p.write_text(text.replace("%s", str(empty)))
        out = tmp_path / f"out{i}"
        code, _, err = run_cli(["run", str(p), "--out", str(out)], capsys)
        assert code == 2, err
        assert needle in err and len(err.strip().splitlines()) == 1
        assert not out.exists()


def test_run_variant_selection(tmp_path, capsys):
    """--variant keeps the named variants in config order with the shared sections untouched; a name the
    config lacks is one line, exit 2, nothing written."""
    from dpaudit import config

    p = tmp_path / "c.toml"
    p.write_text("[train]\nlr = 1e-3\n[[variants]]\nname = 'a'\ntarget_epsilon = inf\n"
                 "[[variants]]\nname = 'b'\ntarget_epsilon = 8.0\n[[variants]]\nname = 'c'\nlr = 5e-4\n")
    full = config.load(p)
    sub = config.load(p, ("c", "b"))
    assert [v.name for v in sub.variants] == ["b", "c"]
    assert sub.variants == full.variants[1:]  # same trainer settings as in the full config
    assert [v["name"] for v in sub.raw["variants"]] == ["b", "c"] and sub.raw["train"] == full.raw["train"]
    assert sub.task == full.task and sub.canaries == full.canaries
    out = tmp_path / "out"
    code, _, err = run_cli(["run", str(p), "--variant", "d", "--out", str(out)], capsys)
    assert code == 2 and "no variant named 'd'" in err and "a, b, c" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_account_card(tmp_path, capsys):
    from dpaudit.accounting import SubsampledGaussian
    from dpaudit.card import Claim, PrivacyCard

    c = PrivacyCard(claim=Claim(epsilon=2.2, delta=1e-5), events=[SubsampledGaussian(0.01, 1.0, 1000)])
    c.save(tmp_path / "card.json")
    assert main(["account", "--card", str(tmp_path / "card.json"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["pld"] == pytest.approx(1.83, abs=0.01) and d["rdp"] == pytest.approx(2.10, abs=0.01)
    g = PrivacyCard(claim=Claim(epsilon=8.0, delta=1e-5, unit="user"), events=[SubsampledGaussian(0.01, 1.0, 1000)],
                    group_size=4, extra={"record_level": {"epsilon": 1.9, "delta": 1e-7}})
    g.save(tmp_path / "group.json")
    assert main(["account", "--card", str(tmp_path / "group.json"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "pld_group_mixture" in d and d["pld_group_mixture"] < d["pld+group_lemma"]
    bad = json.loads((tmp_path / "card.json").read_text())
    del bad["mechanism"]["events"][0]["steps"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["account", "--card", str(tmp_path / "bad.json")]) == 2
    assert "steps" in capsys.readouterr().err
