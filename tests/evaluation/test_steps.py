"""The five steps of ``dpaudit evaluate`` take the earlier steps' values whole: load -> score -> audit -> judge ->
render, run one by one, give the report :func:`evaluate` gives; the judge's value is frozen; the device travels
in the resolved options. (A plan edited into a manifest is refused when the manifest is read: test_eval_plan.py.)"""

import dataclasses

import pytest


@pytest.fixture(scope="module")
def checkpoint_dir(tmp_path_factory, tiny_model_factory):
    from dpaudit import checkpoint
    from dpaudit.accounting.events import SubsampledGaussian
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.claim.card import Claim, PrivacyCard

    model, tok = tiny_model_factory()
    card = PrivacyCard(claim=Claim(epsilon=8.0, delta=1e-5), clipping_norm=1.0, expected_batch_size=10,
                       dataset_size=100, method="dp_adam",
                       events=[SubsampledGaussian(sample_rate=0.1, noise_multiplier=1.0, steps=100)])
    return checkpoint.write(tmp_path_factory.mktemp("steps") / "ck", model, tok, card,
                            generate(CanaryPlan(m=20, length=4)), {})


def _stable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in ("timings", "generated_at")}


def test_the_steps_one_by_one_are_evaluate(checkpoint_dir):
    from dpaudit import checkpoint
    from dpaudit.claim.verdict import Verdict
    from dpaudit.evaluation import steps
    from dpaudit.evaluation.evidence import Evidence
    from dpaudit.evaluation.options import EvalOptions

    opts = EvalOptions(attacks=("loss", "zlib"), device="cpu")
    loaded = steps.load(checkpoint.load(checkpoint_dir), opts)
    assert loaded.opts.device == "cpu" and loaded.opts.attacks == ("loss", "zlib")
    scored = steps.score(loaded)
    ev = steps.audit(loaded, scored)
    verdict = steps.judge(loaded, ev)
    assert isinstance(ev, Evidence) and isinstance(verdict, Verdict)
    report = steps.render(loaded, scored, ev, verdict)
    assert report["verdict"] == verdict.as_dict() and report["verdict"]["status"] == verdict.status
    whole = steps.evaluate(checkpoint_dir, opts)
    assert _stable(report) == _stable(whole)


def test_the_verdict_is_frozen_and_rendering_it_copies():
    from dpaudit.claim.verdict import AccountingCheck, EmpiricalCheck, Verdict
    from dpaudit.errors import DpauditError

    v = Verdict("consistent", "r", AccountingCheck("verified", "pld proves it", 0.9, 1.0),
                EmpiricalCheck("consistent", 0.4, 1.2, 0.95, "found 0.4"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.status = "violated"
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.accounting.status = "violated"  # frozen all the way down
    d = v.as_dict()
    d["accounting"]["status"] = "changed"
    assert v.accounting.status == "verified" and v.status == "consistent"
    # serialised in one place and read back to the same value; words outside the vocabulary are refused
    assert Verdict.from_dict(v.as_dict()) == v
    assert "mechanism" not in d and "off_plan" not in d  # only what changed the headline is written
    with pytest.raises(ValueError, match="not one of"):
        Verdict("fine", "r", v.accounting, v.empirical)
    with pytest.raises(DpauditError, match="verdict cannot be read"):
        Verdict.from_dict({**v.as_dict(), "status": "fine"})



def test_every_committed_reports_verdict_is_the_typed_values_serialisation():
    """The typed Verdict writes the ``verdict`` object every committed report carries, key for key: reading one
    back and writing it again gives the same object (a field renamed or dropped fails here)."""
    import json
    from pathlib import Path

    from dpaudit.claim.verdict import Verdict
    from dpaudit.options import current_words

    root = Path(__file__).resolve().parents[2] / "reports"
    seen = 0
    for f in sorted(root.rglob("report.json")):
        r = json.loads(f.read_text())
        if not isinstance(r.get("verdict"), dict) or "empirical" not in r["verdict"]:
            continue  # not an evaluation's report, or one written before both checks joined the verdict object
        current_words(r)  # an older report's words as their current names, as every reader takes them
        assert Verdict.from_dict(r["verdict"]).as_dict() == r["verdict"], f
        seen += 1
    assert seen >= 90, seen


def test_every_committed_reports_accounting_and_mechanism_checks_are_the_typed_values_serialisation():
    """The accounting check (:class:`dpaudit.claim.reaccount.ClaimAccounting`) and the mechanism checks
    (:class:`dpaudit.audit.rows.MechanismEvidence` of :class:`dpaudit.audit.rows.CheckRow`) write the objects the
    committed reports carry, key for key; a word outside the vocabulary is refused; the values are frozen."""
    import json
    from pathlib import Path

    from dpaudit.audit.rows import CheckRow, MechanismEvidence
    from dpaudit.claim.reaccount import ClaimAccounting
    from dpaudit.errors import DpauditError

    root = Path(__file__).resolve().parents[2] / "reports"
    accounts = checks = 0
    for f in sorted(root.rglob("report.json")):
        r = json.loads(f.read_text())
        a = r.get("accounting")
        if isinstance(a, dict) and set(a) == set(ClaimAccounting((), {}, None, None, None, None, "").as_dict()):
            assert ClaimAccounting.from_dict(a).as_dict() == a, f
            accounts += 1
        for e in r.get("mechanism_checks") or []:
            if set(e) != {"attack", "mode", "coordinates", "optimizer", "world_size", "bound_to_card",
                          "false_alarm_each", "checks"}:
                continue  # written before the record's binding to its card was reported
            assert MechanismEvidence.from_dict(e).as_dict() == e, f
            checks += 1
    assert accounts >= 90 and checks >= 2, (accounts, checks)
    with pytest.raises(ValueError, match="not one of"):
        CheckRow("noise", "passed", "?", 0.0)
    with pytest.raises(ValueError, match="not one of"):
        ClaimAccounting((), {}, None, None, None, "fine", "?")
    with pytest.raises(DpauditError, match="cannot be read"):
        ClaimAccounting.from_dict({"status": "verified"})
    row = CheckRow("noise", "pass", "ok", 0.001, {"p": 0.5})
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.status = "fail"
    d = row.as_dict()
    d["values"]["p"] = 0.0
    assert row.values["p"] == 0.5  # serialising copies


def test_the_scoring_context_never_exceeds_the_models_positions(tmp_path, tiny_model_factory):
    """A checkpoint without a run record is scored at 64 tokens, a small model (32 positions here) at its own
    length: beyond it the position embedding has no row (IndexError, exit 3, before). A run record's max_len is
    read as an integer and capped the same way."""
    from dpaudit import checkpoint
    from dpaudit.canaries.manifest import CanaryPlan, generate
    from dpaudit.claim.card import Claim, PrivacyCard

    model, tok = tiny_model_factory()
    card = PrivacyCard(claim=Claim(epsilon=None, delta=0.0), method="non_private")
    ck_dir = checkpoint.write(tmp_path / "ck", model, tok, card, generate(CanaryPlan(m=4, length=4)), {})
    ck = checkpoint.load(ck_dir)
    assert model.config.n_positions == 32 and ck.positions() == 32 and ck.context_len == 32
    import dataclasses

    assert dataclasses.replace(ck, run={"model": {"max_len": 16.0}}).context_len == 16
    assert dataclasses.replace(ck, run={"model": {"max_len": 4096}}).context_len == 32
    held = checkpoint.Checkpoint(path=None, card=card, manifest=ck.manifest, run={}, objects=(model, tok))
    assert held.positions() == 32 and held.context_len == 32
