"""`dpaudit check REPORT --checkpoint CKPT --rescore` (dpaudit/evaluation/rescore.py): the attack scores
recomputed from the model. `--checkpoint` alone re-derives every decision from the report's scores, so a report whose
scores were replaced consistently passed it; with `--rescore` a score that is not the model's fails the gate, and an
honest report passes."""

import json

import numpy as np
import pytest

from dpaudit.cli import main
from dpaudit.evaluation import rescore


@pytest.mark.parametrize("variant", ["dp", "non-private"])
def test_an_honest_report_passes_with_its_scores_recomputed(run_dir, variant, capsys):
    report, ckpt = run_dir / variant / "report" / "report.json", run_dir / variant / "checkpoint"
    r = json.loads(report.read_text())
    assert r["checkpoint"]["reference_model"] == "base"  # calibrated by the checkpoint's own base: rescored too
    wrong, redone, kept = rescore.mismatches(r, ckpt)
    assert wrong == [] and {"loss", "reference", "exposure", "task metrics"} <= set(redone) and kept == []
    assert main(["check", str(report), "--checkpoint", str(ckpt), "--rescore"]) in (0, 1)  # the policy may fail
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith("FAIL") and "from" in line], out
    if "ok:" in out:
        assert "reference, exposure and the task metrics recomputed from the model)" in out, out
    del r["checkpoint"]["reference_model"]  # a report from before the record: its reference model is unknown
    wrong, redone, kept = rescore.mismatches(r, ckpt)
    assert wrong == [] and "reference" in kept and "reference" not in redone


def test_scores_that_are_not_the_models_are_named(run_dir):
    """The forgery --checkpoint alone cannot see: the scores replaced (here the members' and non-members' swapped
    around the median, so a leaking model looks quiet). The rest of the report is left as it was, so this tests the
    rescoring on its own; `check` then fails on both counts."""
    report = json.loads((run_dir / "non-private" / "report" / "report.json").read_text())
    sc = np.asarray(report["attacks"]["loss"]["scores"])
    report["attacks"]["loss"]["scores"] = list(2 * np.median(sc) - sc)
    wrong, redone, _ = rescore.mismatches(report, run_dir / "non-private" / "checkpoint")
    assert len(wrong) == 1 and wrong[0].endswith(")") and "loss scores are not the model's" in wrong[0], wrong
    one = list(sc)
    one[3] = one[3] * (1 + 10 * rescore.RTOL) + 1.0  # one canary's score moved beyond rounding
    report["attacks"]["loss"]["scores"] = one
    wrong, _, _ = rescore.mismatches(report, run_dir / "non-private" / "checkpoint")
    assert wrong and wrong[0].startswith("1 of the report's") and "audit unit 3" in wrong[0], wrong
    report["attacks"]["loss"]["scores"] = list(sc)
    report["attacks"]["reference"]["scores"] = report["attacks"]["reference"]["scores"][::-1]
    wrong, _, _ = rescore.mismatches(report, run_dir / "non-private" / "checkpoint")
    assert len(wrong) == 1 and "reference scores are not the model's" in wrong[0], wrong
    report["attacks"]["reference"]["scores"] = report["attacks"]["reference"]["scores"][::-1]
    report["exposure"]["canaries"][5]["log_perplexity_bits"] += 3.0  # the exposure section's own numbers
    wrong, _, _ = rescore.mismatches(report, run_dir / "non-private" / "checkpoint")
    assert wrong == ["1 of the report's 60 exposure canaries' log-perplexities are not the model's (canary 5: the "
                     f"report says {report['exposure']['canaries'][5]['log_perplexity_bits']:.6g}, the model gives "
                     f"{report['exposure']['canaries'][5]['log_perplexity_bits'] - 3.0:.6g})"], wrong


def test_rescore_needs_the_checkpoint(run_dir, capsys):
    assert main(["check", str(run_dir / "dp" / "report" / "report.json"), "--rescore"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--checkpoint" in err


def test_a_report_made_through_the_python_api_is_refused_in_words(run_dir):
    """Its scoring context (``api.evaluate(..., max_len=)``) is not in the report: rescoring it at the folder's
    context could accuse an honest report, so it is refused with the way to a report that can be rescored."""
    from dpaudit.errors import DpauditError

    report = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    report["checkpoint"]["path"] = None
    with pytest.raises(DpauditError, match="Python API .* evaluate the folder"):
        rescore.mismatches(report, run_dir / "dp" / "checkpoint")


def test_task_metrics_edited_are_measured_again(run_dir, capsys):
    """The policy's min_accuracy reads metrics.accuracy, which `--checkpoint` takes from the report (and says so);
    `--rescore` measures the task again on the model (dpaudit/evaluation/rescore_metrics.py): an accuracy or a
    per-example outcome string edited fails, a flip at the boundary (within FLIPS examples) does not."""
    from dpaudit.evaluation import rescore_metrics

    report = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    ckpt = run_dir / "dp" / "checkpoint"
    m = report["metrics"]
    edits = [("accuracy", min(1.0, m["accuracy"] + 0.3)), ("n_test", m["n_test"] + 1), ("task", "table2text"),
             ("correct", "".join("1" if c == "0" else "0" for c in m["correct"]))]
    for key, value in edits:
        r = json.loads(json.dumps(report))
        r["metrics"][key] = value
        wrong, _, _ = rescore.mismatches(r, ckpt)
        assert len(wrong) == 1 and "task metrics are not the model's" in wrong[0] and key in wrong[0], (key, wrong)
    r = json.loads(json.dumps(report))
    flipped = list(m["correct"])
    flipped[0] = "1" if flipped[0] == "0" else "0"
    r["metrics"]["correct"] = "".join(flipped)
    r["metrics"]["accuracy"] = flipped.count("1") / len(flipped)
    assert rescore_metrics.FLIPS >= 1 and rescore.mismatches(r, ckpt)[0] == []
    capsys.readouterr()
    assert main(["check", str(run_dir / "dp" / "report" / "report.json"), "--checkpoint", str(ckpt)]) in (0, 1)
    out = capsys.readouterr().out
    assert "FAIL re-derived" not in out
    if "ok:" in out:
        assert "and the task metrics taken from the report" in out, out


def test_the_base_models_metrics_are_measured_again_too(run_dir, tmp_path, capsys):
    """metrics.base_model (`evaluate --base-metrics`: the utility the fine-tune is read against) passed --rescore
    edited; now the base the report was made with is measured again and each of its metrics compared."""
    ckpt = run_dir / "dp" / "checkpoint"
    out = tmp_path / "r"
    assert main(["evaluate", str(ckpt), "--out", str(out), "--base-metrics", "--quiet"]) == 0, capsys.readouterr().err
    report = json.loads((out / "report.json").read_text())
    assert isinstance(report["metrics"]["base_model"], dict)
    assert rescore.mismatches(report, ckpt)[0] == []
    r = json.loads(json.dumps(report))
    r["metrics"]["base_model"]["accuracy"] = min(1.0, r["metrics"]["base_model"]["accuracy"] + 0.3)
    wrong = rescore.mismatches(r, ckpt)[0]
    assert len(wrong) == 1 and "base_model.accuracy" in wrong[0], wrong
