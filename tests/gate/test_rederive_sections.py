"""`dpaudit check --checkpoint` re-derives the accounting and exposure sections whole (dpaudit/gate/rederive.py,
rederive_exposure.py). Found by editing every leaf of an external checkpoint's report in turn: the accounting's
rows, reasons and tolerance and every number of the exposure section (whose worst canary the policy's
``max_exposure`` reads) passed the gate edited."""

import copy
import json

import pytest

from dpaudit.gate import rederive, rederive_exposure


@pytest.fixture(scope="module")
def evaluated(run_dir):
    ck = run_dir / "dp" / "checkpoint"
    report = json.loads((run_dir / "dp" / "report" / "report.json").read_text())
    assert rederive.mismatches(report, ck) == []  # the honest report agrees, exposure section included
    assert report["exposure"]["n_references"] == len(report["exposure"]["reference_log_perplexity_bits"])
    return report, ck


def _edited(report, path, value):
    r = copy.deepcopy(report)
    d = r
    for k in path[:-1]:
        d = d[k]
    if value is KeyError:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return r


@pytest.mark.parametrize("path,value", [
    (("exposure", "canaries", 3, "exposure"), 0.0),
    (("exposure", "canaries", 3, "exposure_extrapolated"), 0.0),
    (("exposure", "canaries", 3, "inserted"), "flip"),
    (("exposure", "epsilon_lb", "value"), 5.0),
    (("exposure", "epsilon_lb", "kind"), "bound"),
    (("exposure", "mean_inserted"), 0.0),
    (("exposure", "rank1_inserted"), 0),
    (("exposure", "n_references"), 10_000),
    (("exposure", "n_references"), 7),
    (("exposure", "n_references"), KeyError),
    (("exposure", "enumerated"), True),
    (("exposure", "suffix_scored"), False),
    (("exposure", "reference_log_perplexity_bits"), "half"),
    (("exposure",), KeyError),
    (("accounting", "reason"), "consistent"),
    (("accounting", "tolerance"), 0.5),
    (("accounting", "results", 0, "detail"), "exact"),
    (("accounting", "findings"), ["none"]),
])
def test_an_edited_leaf_fails_the_gate(evaluated, path, value):
    report, ck = evaluated
    if value == "flip":
        value = not report["exposure"]["canaries"][3]["inserted"]
    if value == "half":
        value = report["exposure"]["reference_log_perplexity_bits"][::2]
    if path[-1] == "rank1_inserted" and report["exposure"]["rank1_inserted"] == 0:
        value = 1
    assert rederive.mismatches(_edited(report, path, value), ck), path


def test_a_log_perplexity_moved_shows_in_the_attack_and_in_the_ranks(evaluated):
    report, ck = evaluated
    r = copy.deepcopy(report)
    r["exposure"]["canaries"][5]["log_perplexity_bits"] -= 30.0  # the canary made to look memorised
    lines = rederive.mismatches(r, ck)
    assert any("exposure attack scores are not its exposure section's" in line for line in lines), lines
    assert any("evidence is not the one re-derived" in line and "exposure/" in line for line in lines), lines


def test_past_the_kept_references_the_canaries_are_checked_against_the_manifest(evaluated):
    """A report that ranked against more references than report.json keeps (5,000) cannot have its ranks derived
    again; its canaries' identities and memberships still must be the manifest's."""
    from dpaudit import checkpoint

    report, ck = evaluated
    man = checkpoint.load(ck).manifest
    expo = copy.deepcopy(report["exposure"])
    expo["reference_log_perplexity_bits"] = (expo["reference_log_perplexity_bits"] * 5000)[:5000]
    expo["n_references"] = 8000
    scores = {a: v["scores"] for a, v in report["attacks"].items() if isinstance(v.get("scores"), list)}
    got, lines = rederive_exposure.exposure_of({"exposure": expo}, man, scores)
    assert got is None and lines == []
    expo["canaries"][0]["inserted"] = not expo["canaries"][0]["inserted"]
    _, lines = rederive_exposure.exposure_of({"exposure": expo}, man, scores)
    assert lines and "ids, memberships, secrets" in lines[0]
