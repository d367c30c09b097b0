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
           ("[train]\nclipping_norm = 1e308\n", "clipping_norm must be in (0, 1e+06]"),  # sigma x C overflowed
           ("[train]\nclipping_norm = 0.0\n", "clipping_norm must be in (0, 1e+06]"),
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
    from dpaudit.run import config

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
    from dpaudit.claim.card import Claim, PrivacyCard

    c = PrivacyCard(claim=Claim(epsilon=2.2, delta=1e-5), events=[SubsampledGaussian(0.01, 1.0, 1000)])
    c.save(tmp_path / "card.json")
    assert main(["account", "--card", str(tmp_path / "card.json"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    by = {r["accountant"]: r for r in d["results"]}
    assert d["verdict"] == "verified" and d["status"] == "verified"
    assert by["pld"]["epsilon"] == pytest.approx(1.83, abs=0.01) and by["rdp"]["epsilon"] == pytest.approx(2.10, abs=0.01)
    assert by["pld"]["lower"] <= 1.83 <= by["prv"]["epsilon"] and by["rdp"]["lower"] is None
    under = PrivacyCard(claim=Claim(epsilon=1.5, delta=1e-5), events=[SubsampledGaussian(0.01, 1.0, 1000)])
    under.save(tmp_path / "under.json")
    assert main(["account", "--card", str(tmp_path / "under.json")]) == 1
    assert "under-claim" in capsys.readouterr().out
    g = PrivacyCard(claim=Claim(epsilon=9.0, delta=1e-5, unit="user"), events=[SubsampledGaussian(0.01, 1.0, 1000)],
                    group_size=4, extra={"record_level": {"epsilon": 1.9, "delta": 1e-7}})
    g.save(tmp_path / "group.json")
    assert main(["account", "--card", str(tmp_path / "group.json"), "--json"]) == 0
    d = {r["accountant"]: r["epsilon"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert "pld_group_mixture" in d and d["pld_group_mixture"] < d["pld+group_lemma"]
    bad = json.loads((tmp_path / "card.json").read_text())
    del bad["mechanism"]["events"][0]["steps"]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["account", "--card", str(tmp_path / "bad.json")]) == 2
    assert "steps" in capsys.readouterr().err


def test_canaries_new_writes_manifest_and_records(tmp_path, capsys):
    from dpaudit.canaries.manifest import load_manifest, regenerate

    out, recs = tmp_path / "canaries.json", tmp_path / "records.jsonl"
    assert main(["canaries", "new", "--m", "40", "--repetitions", "3", "--seed", "5", "--template",
                 "Card {secret} is mine", "--out", str(out), "--records", str(recs)]) == 0
    man = load_manifest(out)
    assert regenerate(man) and man.plan.seed == 5 and man.plan.prefix == "Card " and man.plan.suffix == " is mine"
    lines = [json.loads(x) for x in recs.read_text().splitlines()]
    assert len(lines) == 3 * len(man.inserted) and set(lines[0]) == {"text"}
    assert {x["text"] for x in lines} == {c.text for c in man.inserted}  # held-out canaries are not there
    assert man.to_dict()["audit_plan"]["k_pos"] == 10
    capsys.readouterr()
    # the manifest must not change once a model trained on it: refused without --force, nothing rewritten
    before = out.read_text()
    assert main(["canaries", "new", "--m", "40", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == before
    # no seed: a fresh one, recorded
    assert main(["canaries", "new", "--m", "40", "--out", str(tmp_path / "b.json")]) == 0
    assert regenerate(load_manifest(tmp_path / "b.json"))
    assert "line break" not in capsys.readouterr().out
    # a template over two lines: a one-record-per-line pipeline would split each canary (said, not refused)
    assert main(["canaries", "new", "--m", "40", "--template", "Note:\n{secret}", "--out", str(tmp_path / "c.json")]) == 0
    assert "holds a line break" in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["--m", "1"], "m must be"),
    (["--m", "40", "--template", "no secret here"], "{secret}"),
    (["--m", "40", "--repetitions", "0"], "repetitions"),
    (["--m", "100000", "--length", "3"], "too small"),
])
def test_canaries_new_bad_input(tmp_path, capsys, args, needle):
    out = tmp_path / "c.json"
    assert main(["canaries", "new", *args, "--out", str(out), "--records", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_card_command(tmp_path, capsys):
    from dpaudit.claim.card import load_card

    out = tmp_path / "card.json"
    base = ["card", "--epsilon", "2.2", "--delta", "1e-5", "--sigma", "1.0", "--sample-rate", "0.01", "--steps",
            "1000", "--batch-size", "100", "--dataset-size", "10000", "--clipping-norm", "1.0"]
    assert main([*base, "--out", str(out)]) == 0
    c = load_card(out)
    assert c.claim.epsilon == 2.2 and c.events[0].steps == 1000 and c.dataset_size == 10000
    assert c.claim.accountant == "external" and c.events[0].sampler == "poisson"
    capsys.readouterr()
    bad = [(["--sigma", "-1"], "sigma"), (["--delta", "2"], "delta"), (["--sample-rate", "1.5"], "sample rate"),
           (["--sampler", "magic"], "magic"), (["--epsilon", "-1"], "epsilon")]
    for change, needle in bad:
        args = list(base)
        i = args.index(change[0]) if change[0] in args else None
        if i is None:
            args += change
        else:
            args[i + 1] = change[1]
        target = tmp_path / "bad.json"
        assert main([*args, "--out", str(target)]) == 2, change
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (change, err)
        assert not target.exists()
    assert main([*base, "--out", str(tmp_path / "no" / "card.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_card_non_private_writes_a_baseline_that_evaluate_audits(tmp_path, capsys):
    """A model trained without noise elsewhere had no card the CLI could write (every mechanism option was
    required); --non-private writes one with no claim, and mechanism options beside it are refused."""
    import json

    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit import api
    from dpaudit.claim.card import load_card
    from dpaudit.tasks.models import public_bpe_tokenizer

    ck = tmp_path / "baseline"
    tok = public_bpe_tokenizer(256)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=64, n_embd=16, n_layer=1, n_head=2)).save_pretrained(ck)
    tok.save_pretrained(ck)
    api.new_canaries(m=16, seed=3).save(ck / "canaries.json")
    assert main(["card", "--non-private", "--dataset-size", "500", "--out", str(ck / "privacy_card.json")]) == 0
    assert "no claim" in capsys.readouterr().out
    c = load_card(ck / "privacy_card.json")
    assert not c.is_private and c.events == [] and c.dataset_size == 500
    assert main(["evaluate", str(ck), "--out", str(tmp_path / "r"), "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "r" / "report.json").read_text())["verdict"]["status"] == "no-claim"
    for extra in (["--epsilon", "8"], ["--sigma", "1"], ["--intended-epsilon", "8"]):
        assert main(["card", "--non-private", *extra, "--out", str(tmp_path / "x.json")]) == 2
        err = capsys.readouterr().err
        assert f"{extra[0]} describes a DP mechanism" in err and len(err.strip().splitlines()) == 1
    assert main(["card", "--epsilon", "8", "--delta", "1e-5", "--out", str(tmp_path / "x.json")]) == 2
    assert "--sigma is required" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_insert_canaries_into_a_dataset():
    from datasets import Dataset

    from dpaudit.canaries.making import new
    from dpaudit.canaries.planting import insert_canaries
    from dpaudit.errors import DpauditError

    man = new(m=20, repetitions=2, seed=3)
    ds = Dataset.from_dict({"text": [f"public {i}" for i in range(50)], "source": ["web"] * 50})
    with pytest.raises(DpauditError, match="fill="):
        insert_canaries(ds, man)
    with pytest.raises(DpauditError, match="no column 'body'"):
        insert_canaries(ds, man, column="body")
    from datasets import DatasetDict

    with pytest.raises(DpauditError, match=r"insert_canaries\(ds\['train'\]"):  # load_dataset's usual return
        insert_canaries(DatasetDict(train=ds, test=ds), man)
    with pytest.raises(DpauditError, match="streaming=True"):
        insert_canaries(ds.to_iterable_dataset(), man)
    for seed in (-1, 1.5, True):  # a negative seed crashed the shuffle's NumPy generator (ValueError)
        with pytest.raises(DpauditError, match="seed"):
            insert_canaries(ds, man, fill={"source": "canary"}, seed=seed)
    mixed = insert_canaries(ds, man, fill={"source": "canary"}, seed=1)
    assert len(mixed) == 50 + 2 * len(man.inserted) and mixed.features == ds.features
    planted = [t for t, s in zip(mixed["text"], mixed["source"]) if s == "canary"]
    assert sorted(planted) == sorted(man.training_texts())
    positions = [i for i, s in enumerate(mixed["source"]) if s == "canary"]
    assert positions != list(range(50, len(mixed)))  # shuffled in, not appended
    assert len(ds) == 50  # the input is unchanged
    labelled = new(m=20, seed=3, labels=2)
    cls = Dataset.from_dict({"sentence": ["a", "b"], "label": [0, 1]})
    out = insert_canaries(cls, labelled, column="sentence", label_column="label")
    assert sorted(zip(out["sentence"], out["label"]))[:0] == [] and len(out) == 2 + len(labelled.inserted)
    assert {(c.text, c.label) for c in labelled.inserted} <= set(zip(out["sentence"], out["label"]))
    # the types of the user's columns: one line each, never arrow's traceback (a hostile round, 2026-12-01)
    with pytest.raises(DpauditError, match="do not fit the dataset's column types"):
        insert_canaries(Dataset.from_dict({"text": ["a"], "n": [1]}), man, fill={"n": "not a number"})
    with pytest.raises(DpauditError, match="before tokenizing"):
        insert_canaries(Dataset.from_dict({"text": [[1, 2]]}), man)


def test_run_train_only_writes_checkpoints_that_evaluate_audits_later(tmp_path, capsys):
    """--train-only: the checkpoint and nothing else (no report, no comparison); `dpaudit evaluate` on it later
    writes the report `dpaudit run` would have; with --resume it is refused before any work."""
    from tests.settings import TINY_RUN

    p = tmp_path / "c.toml"
    cfg = TINY_RUN.replace("[evaluate]\n", "[evaluate]\nattacks = [\"loss\"]\n")  # the audit's cost is not what is tested
    p.write_text(cfg + "[train]\nepochs = 1\n[[variants]]\nname = 'dp'\ntarget_epsilon = 8.0\n")
    out = tmp_path / "out"
    code, text, _ = run_cli(["run", str(p), "--out", str(out), "--train-only", "--quiet"], capsys)
    assert code == 0 and "dp: trained:" in text and "dpaudit evaluate" in text
    assert (out / "dp" / "checkpoint" / "privacy_card.json").is_file()
    assert not (out / "dp" / "report").exists() and not (out / "REPORT.md").exists()
    code, _, _ = run_cli(["evaluate", str(out / "dp" / "checkpoint"), "--out", str(out / "dp" / "report"), "--quiet"],
                         capsys)
    assert code == 0 and json.loads((out / "dp" / "report" / "report.json").read_text())["verdict"]["status"]
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o2"), "--train-only", "--resume"], capsys)
    assert code == 2 and "--train-only cannot be combined with --resume" in err and not (tmp_path / "o2").exists()


@pytest.mark.parametrize("call,needle", [
    (lambda m, t, c, g: api_evaluate(m, None, c, g), "tokenizer"),
    (lambda m, t, c, g: api_evaluate(__import__("torch").nn.Linear(2, 2), t, c, g), "Hugging Face model"),
    (lambda m, t, c, g: api_evaluate("some/folder", t, c, g), "dpaudit evaluate FOLDER"),
    (lambda m, t, c, g: api_evaluate(m, t, c, g, colour=1), "no setting 'colour'"),
    (lambda m, t, c, g: api_evaluate(m, t, c, g, max_len=0), "max_len"),
    (lambda m, t, c, g: api_evaluate(m, t, c, g, probe=5), "probe must be"),
], ids=["no tokenizer", "a plain module", "a folder path", "an unknown setting", "max_len 0", "a probe of no kind"])
def test_the_python_evaluate_checks_its_objects_in_one_line(call, needle, tiny_model_factory):
    """Before: AttributeError / TypeError tracebacks, and max_len=0 silently read as 64 (a hostile round,
    2026-12-01)."""
    from dpaudit.canaries.making import new
    from dpaudit.claim.card import Claim, PrivacyCard
    from dpaudit.errors import DpauditError

    model, tok = tiny_model_factory()
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0, accountant="none"), method="non_private")
    with pytest.raises(DpauditError, match=needle):
        call(model, tok, card, new(m=20, seed=1))


def api_evaluate(*args, **kwargs):
    from dpaudit import api

    return api.evaluate(*args, **kwargs)


@pytest.mark.parametrize("name,args,needle", [
    ("add_canary_tokens", ("NONE", "TOK", "MAN"), "Hugging Face model"),
    ("add_canary_tokens", ("MODEL", "NONE", "MAN"), "tokenizer"),
    ("add_canary_tokens", ("MODEL", "TOK", 5), "canaries' Manifest"),
    ("canary_labels", ("Code x", "TOK", "MAN"), "token ids"),
    ("canary_labels", ([1, 2], "NONE", "MAN"), "tokenizer"),
    ("write_report", ({"x": 1}, "OUT"), "report dict"),
    ("write_report", ([1], "OUT"), "report dict"),
    ("write_records", ("NONE", "OUT"), "canaries' Manifest"),
    ("insert_canaries", ("NONE", "NONE"), "canaries' Manifest"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_every_public_function_refuses_objects_of_the_wrong_kind_in_one_line(name, args, needle, tmp_path,
                                                                             tiny_model_factory):
    """AttributeError, KeyError and TypeError tracebacks before (a hostile round on the Python API, 2026-12-01)."""
    from dpaudit import api
    from dpaudit.errors import DpauditError

    model, tok = tiny_model_factory()
    man = api.new_canaries(m=10, seed=1, template="Code {secret}", design="new-token", length=1, init="zero")
    given = {"NONE": None, "TOK": tok, "MAN": man, "MODEL": model, "OUT": tmp_path / "out"}
    with pytest.raises(DpauditError, match=needle):
        getattr(api, name)(*[given.get(a, a) if isinstance(a, str) else a for a in args])
    assert not (tmp_path / "out").exists()


def test_the_probe_and_sampling_api_refuse_objects_of_the_wrong_kind_in_one_line():
    from dpaudit import api
    from dpaudit.errors import DpauditError

    kw = dict(clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=10, sample_rate=0.1)
    for shapes in ([("a",)], [(2.5, 2)], ["64"]):
        with pytest.raises(DpauditError, match="not a shape"):
            api.functional_probe(shapes, **kw)
    with pytest.raises(DpauditError, match="canaries' Manifest"):
        api.sample_canaries_at_rate(None, None, None)
