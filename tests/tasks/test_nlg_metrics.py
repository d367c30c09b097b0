"""Table-to-text metrics: CIDEr-D against coco-caption's reference implementation, NIST/METEOR/ROUGE-L
sanity, and the WordNet installer's error paths."""

import pytest

from dpaudit.errors import DpauditError
from dpaudit.tasks import assets, nlg_metrics

HYPS = ["the eagle is a coffee shop near burger king .", "zizzi serves cheap food in the city centre .",
        "a pub called the mill ."]
REFS = [["the eagle is a cheap coffee shop near burger king .", "near burger king is the eagle coffee shop ."],
        ["zizzi is a cheap restaurant in the city centre .", "in the city centre , zizzi serves cheap food .",
         "zizzi , cheap , city centre ."],
        ["the mill is a pub .", "there is a pub called the mill near the river ."]]


def test_cider_d_equals_coco_caption():
    # pycocoevalcap 1.2 (Cider().compute_score on the same whitespace-tokenised strings) gives
    # corpus 4.6244032745369115, per item [5.8759344, 4.41359242, 3.58368301]
    split = str.split
    assert nlg_metrics.cider_d(HYPS, REFS, tokenizer=split) == pytest.approx(4.6244032745369115, rel=1e-9)
    # a one-item corpus has log(1) - log(df) = 0 idf everywhere: CIDEr is 0 by construction, as in coco
    assert nlg_metrics.cider_d(HYPS[:1], REFS[:1], tokenizer=split) == 0.0


def test_cider_rewards_the_reference_and_penalises_length():
    refs = REFS
    exact = [r[0] for r in refs]
    assert nlg_metrics.cider_d(exact, refs) > nlg_metrics.cider_d(HYPS, refs)
    padded = [h + " and it is very very nice and good and fine" for h in HYPS]
    assert nlg_metrics.cider_d(padded, refs) < nlg_metrics.cider_d(HYPS, refs)


def test_nist_and_rouge_order_hypotheses_by_quality():
    exact = [r[0] for r in REFS]
    wrong = ["the weather is nice today ."] * 3
    for f in (nlg_metrics.nist, nlg_metrics.rouge_l, nlg_metrics.bleu):
        assert f(exact, REFS) > f(HYPS, REFS) > f(wrong, REFS)
    assert nlg_metrics.rouge_l(exact, REFS) == pytest.approx(100.0)


def test_score_reports_meteor_or_says_why_not():
    out = nlg_metrics.score(HYPS, REFS)
    assert {"bleu", "nist", "rougeL", "cider"} <= set(out)
    if assets.wordnet_dir() is None:
        assert "meteor" not in out and "dpaudit assets --wordnet" in out["notes"][0]
    else:
        assert 0 < out["meteor"] < 100


@pytest.mark.skipif(assets.wordnet_dir() is None, reason="WordNet not installed (dpaudit assets --wordnet)")
def test_meteor_uses_wordnet_synonyms():
    from nltk.translate.meteor_score import meteor_score

    # value from ../shared/research/offline_assets.md (NLTK + Debian WordNet 3.0)
    assert meteor_score([["the", "dog", "runs", "fast"]], ["a", "dog", "ran", "quickly"]) == pytest.approx(0.469, abs=1e-3)
    assert nlg_metrics.meteor(["the dog ran quickly"], [["the dog runs fast"]]) > \
        nlg_metrics.meteor(["the dog sat still"], [["the dog runs fast"]])


def test_lexnames_and_wordnet_installer_errors(tmp_path, monkeypatch):
    lines = assets.lexnames_text().splitlines()
    assert len(lines) == 45 and lines[5] == "05\tnoun.animal\t1" and lines[44] == "44\tadj.ppl\t3"
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "data.noun").write_text("")
    with pytest.raises(DpauditError, match="lacks WordNet file index.noun"):
        assets.install_wordnet(tmp_path / "src")
    assert assets.wordnet_dir() is None  # nothing half-installed
