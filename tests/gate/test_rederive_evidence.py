"""`dpaudit check --checkpoint` re-derives the probe's evidence and the verdict (dpaudit/gate/rederive.py): the
mechanism and noise checks from the folder's records (no model needed), the test rows, limits, attack metrics and
tiers from the report's own scores with the evaluation's audit step, and the verdict from them and the re-derived
accounting. Forged reports the gate passed before: a half-noise run's report edited to `consistent`, a folder whose
card names its probe run with the records removed, and (a hostile round, 2026-11-29) any number of a test row,
limit, check reading, canary count or tier edited while the verdict was left alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpaudit import accounting, api, checkpoint
from dpaudit.accounting import SubsampledGaussian
from dpaudit.canaries.manifest import CanaryPlan, generate
from dpaudit.claim.card import Claim, PrivacyCard
from dpaudit.cli import main

pytestmark = pytest.mark.filterwarnings("ignore")
N, Q, C, SIGMA, T = 400, 0.1, 1.0, 1.0, 40
SHAPES = {"w": (16, 8), "b": (8,)}


def _folder(root: Path, tiny_model_factory, half_noise: bool) -> Path:
    """A tiny model's checkpoint whose card names the run of a functional probe that watched T steps of a
    hand-written DP step (the noise halved when ``half_noise``), with the probe's records beside it."""
    rng = np.random.default_rng(1)
    B = Q * N
    probe = api.functional_probe(SHAPES, sample_rate=Q, clipping_norm=C, noise_multiplier=SIGMA,
                                 expected_batch_size=B, m=100, seed=1, dataset_size=N, on_fail=None)
    for _ in range(T):
        b = int(rng.binomial(N, Q))
        total = {k: np.zeros(s) for k, s in SHAPES.items()}
        for _ in range(b):
            g = {k: rng.normal(size=s) for k, s in SHAPES.items()}
            norm = np.sqrt(sum(float((v ** 2).sum()) for v in g.values()))
            for k in SHAPES:
                total[k] += g[k] * min(1.0, C / norm)
        clipped = probe.add_canaries(total, records=b)
        std = SIGMA * C / (2 if half_noise else 1)
        probe.observe({k: (np.asarray(clipped[k]) + rng.normal(0, std, SHAPES[k])) / B for k in SHAPES})
    event = SubsampledGaussian(Q, SIGMA, T, "poisson")
    eps = accounting.compute([event], 1e-5, "prv").epsilon
    card = probe.bind(PrivacyCard(claim=Claim(epsilon=eps, delta=1e-5, accountant="prv"), events=[event],
                                  clipping_norm=C, expected_batch_size=B, dataset_size=N, method="hand-written"))
    model, tok = tiny_model_factory()
    ck = checkpoint.write(root / "ck", model, tok, card, generate(CanaryPlan(m=20, length=4)), {})
    probe.save(ck)
    return ck


def _evaluate(ck: Path, out: Path) -> dict:
    assert main(["evaluate", str(ck), "--out", str(out), "--attacks", "loss", "--quiet"]) in (0, 1)
    return json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def honest(tmp_path_factory, tiny_model_factory):
    root = tmp_path_factory.mktemp("honest")
    ck = _folder(root, tiny_model_factory, half_noise=False)
    return ck, _evaluate(ck, root / "report"), root / "report" / "report.json"


@pytest.fixture(scope="module")
def half(tmp_path_factory, tiny_model_factory):
    root = tmp_path_factory.mktemp("half")
    ck = _folder(root, tiny_model_factory, half_noise=True)
    return ck, _evaluate(ck, root / "report"), root / "report" / "report.json"


def test_an_honest_report_passes_the_rederivation(honest, capsys):
    ck, r, path = honest
    assert {c["check"]: c["status"] for c in r["mechanism_checks"][0]["checks"]}["noise"] == "pass"
    assert r["verdict"]["status"] in ("consistent", "underpowered"), r["verdict"]
    assert main(["check", str(path), "--checkpoint", str(ck)]) == 0, capsys.readouterr()


def test_a_half_noise_report_edited_to_consistent_passes_alone_and_fails_against_its_folder(half, tmp_path, capsys):
    ck, r, _ = half
    assert r["verdict"]["status"] == "mechanism-mismatch", r["verdict"]
    forged = json.loads(json.dumps(r))
    forged["verdict"] = {**forged["verdict"], "status": "consistent", "reason": "all good"}
    for e in forged["mechanism_checks"]:
        for c in e["checks"]:
            c["status"] = "pass" if c["status"] == "fail" else c["status"]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(forged))
    assert main(["check", str(path)]) == 0  # the JSON alone is consistent with itself: what --checkpoint is for
    capsys.readouterr()
    assert main(["check", str(path), "--checkpoint", str(ck)]) == 1
    err = capsys.readouterr()
    text = err.out + err.err
    assert "mechanism checks" in text and "'mechanism-mismatch'" in text, text


def _first_number(d: dict) -> str:
    return next(k for k, v in d.items() if isinstance(v, (int, float)) and not isinstance(v, bool))


def _double(d: dict, key: str) -> None:
    d[key] = d[key] * 2 if d[key] else 1


EVIDENCE_EDITS = {  # each edit leaves the verdict as it was and the report valid against its schema
    "a test row's correct guesses doubled": lambda r: _double(r["empirical"][0], "r"),
    "a test row dropped": lambda r: r["empirical"].pop(),
    "the best row's bound raised": lambda r: r["empirical_best"].update(epsilon_lb=r["empirical_best"]["epsilon_lb"] + 0.1),
    "a mechanism check's reading doubled": lambda r: _double(r["mechanism_checks"][0]["checks"][0]["values"],
                                                             _first_number(r["mechanism_checks"][0]["checks"][0]["values"])),
    "the limits removed": lambda r: r.update(audit_limits=[]),
    "an untested tier marked tested": lambda r: r["evidence_tiers"]["final weights"].update(tested=True),
    "one more canary said inserted": lambda r: _double(r["canary_plan"], "inserted"),
    "an attack's AUC": lambda r: r["attacks"]["loss"].update(auc=0.5),
    "the verdict's reason": lambda r: r["verdict"].update(reason="all good"),
}


@pytest.mark.parametrize("edit", EVIDENCE_EDITS, ids=list(EVIDENCE_EDITS))
def test_an_edit_to_the_evidence_that_leaves_the_verdict_alone_is_caught(edit, honest, tmp_path, capsys):
    ck, r, _ = honest
    forged = json.loads(json.dumps(r))
    EVIDENCE_EDITS[edit](forged)
    assert forged != r
    path = tmp_path / "report.json"
    path.write_text(json.dumps(forged))
    assert main(["check", str(path), "--checkpoint", str(ck)]) == 1
    text = "".join(capsys.readouterr())
    assert "the report's evidence is not the one re-derived from its scores" in text, text


def test_only_the_verdict_edited_is_caught_too(half, tmp_path, capsys):
    ck, r, _ = half
    forged = {**r, "verdict": {**r["verdict"], "status": "underpowered"}}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(forged))
    assert main(["check", str(path), "--checkpoint", str(ck)]) == 1
    text = "".join(capsys.readouterr())
    assert "verdict 'underpowered' is not the one re-derived" in text, text


def test_records_removed_from_a_folder_whose_card_names_its_probe_run_fail(honest, tmp_path, capsys):
    ck, _, _ = honest
    bare = tmp_path / "bare"
    shutil.copytree(ck, bare)
    for f in bare.glob("gradient_canaries*"):
        f.unlink()
    r = _evaluate(bare, tmp_path / "report")
    checks = [c for e in r["mechanism_checks"] for c in e["checks"]]
    assert [(c["check"], c["status"]) for c in checks] == [("records", "fail")]
    assert r["verdict"]["status"] == "mechanism-mismatch"
    assert "REPORT.md" and "records" in (tmp_path / "report" / "REPORT.md").read_text()
    assert main(["check", str(tmp_path / "report" / "report.json")]) == 1  # the default policy fails it
    capsys.readouterr()
    assert main(["check", str(tmp_path / "report" / "report.json"), "--checkpoint", str(bare)]) == 1


def test_a_report_made_through_the_python_api_binds_to_the_folder_the_model_was_saved_into(tmp_path,
                                                                                            tiny_model_factory,
                                                                                            capsys):
    """dpaudit.api.evaluate hashes a model held as objects; `check --checkpoint` loads the folder's model and
    hashes it the same way, so the API's report passes against the folder it was saved into, and fails against
    another model's folder with a line that says how to bind it."""
    event = SubsampledGaussian(Q, SIGMA, T, "poisson")
    card = PrivacyCard(claim=Claim(epsilon=accounting.compute([event], 1e-5, "prv").epsilon, delta=1e-5,
                                   accountant="prv"), events=[event], clipping_norm=C, expected_batch_size=Q * N,
                       dataset_size=N, method="external")
    manifest = generate(CanaryPlan(m=20, length=4))
    model, tok = tiny_model_factory()
    r = api.evaluate(model, tok, card, manifest)
    api.write_report(r, tmp_path / "report")
    for folder, m in ((tmp_path / "model", model), (tmp_path / "other", tiny_model_factory(seed=1)[0])):
        folder.mkdir()
        m.save_pretrained(folder)
        tok.save_pretrained(folder)
        card.save(folder / "privacy_card.json")
        manifest.save(folder / "canaries.json")
    report = str(tmp_path / "report" / "report.json")
    assert main(["check", report, "--checkpoint", str(tmp_path / "model")]) == 0, capsys.readouterr()
    capsys.readouterr()
    assert main(["check", report, "--checkpoint", str(tmp_path / "other")]) == 1
    assert "made from objects" in capsys.readouterr().out


def test_an_edited_manifest_is_refused_or_exploratory_never_as_planned(honest, tmp_path, capsys):
    """canaries.json edited after training (here its plan's confidence): refused; with --off-plan evaluated, and
    the report is off-plan with the edit as a departure even when the settings match the edited plan."""
    ck, _, _ = honest
    edited = tmp_path / "ck"
    shutil.copytree(ck, edited)
    man = json.loads((edited / "canaries.json").read_text())
    from dpaudit.canaries import plan as eval_plan

    man["audit_plan"]["evaluation"] = {**eval_plan.DEFAULTS, "attacks": ["loss"], "confidence": 0.5}
    (edited / "canaries.json").write_text(json.dumps(man))
    assert main(["evaluate", str(edited), "--out", str(tmp_path / "r"), "--quiet"]) == 2
    assert "not the manifest this model was trained with" in capsys.readouterr().err
    assert main(["evaluate", str(edited), "--out", str(tmp_path / "r"), "--quiet", "--off-plan"]) in (0, 1)
    entry = json.loads((tmp_path / "r" / "report.json").read_text())["audit_plan"]
    assert entry["status"] == "off-plan" and any("edited after training" in d for d in entry["departures"]), entry


def test_a_failed_gate_says_each_cause_once(half, capsys):
    """One FAIL line per failure: the verdict's line points at the mechanism checks' lines instead of repeating
    their findings (issue wave 5 · 4/5)."""
    _, r, path = half
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    finding = next(c["finding"] for e in r["mechanism_checks"] for c in e["checks"] if c["status"] == "fail")
    assert out.count(finding[:60]) == 1, out
    assert any(ln.startswith("FAIL") and "FAIL lines above" in ln for ln in out.splitlines()), out


def test_scores_of_other_canaries_are_named(honest, tmp_path, capsys):
    """A report whose scores are not one per canary of the folder's manifest was made from other canaries."""
    ck, r, _ = honest
    forged = json.loads(json.dumps(r))
    forged["attacks"]["loss"]["scores"].pop()
    path = tmp_path / "report.json"
    path.write_text(json.dumps(forged))
    assert main(["check", str(path), "--checkpoint", str(ck)]) == 1
    assert "are not one per audit unit of the folder's manifest (20)" in "".join(capsys.readouterr())
