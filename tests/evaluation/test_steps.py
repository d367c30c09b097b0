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
    from dpaudit.claim.verdict import Verdict

    v = Verdict.of({"status": "consistent", "reason": "r", "accounting": {"status": "verified"}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.status = "violated"
    with pytest.raises(TypeError):
        v.fields["status"] = "violated"
    with pytest.raises(TypeError):
        v.fields["accounting"]["status"] = "violated"  # frozen all the way down
    d = v.as_dict()
    d["accounting"]["status"] = "changed"
    assert v.fields["accounting"]["status"] == "verified" and v.status == "consistent"

