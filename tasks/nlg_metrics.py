"""Generation metrics of the E2E challenge, grouped per meaning representation (one hypothesis per MR,
all of that MR's references), all offline:

* BLEU: sacrebleu's corpus BLEU (its own 13a tokenisation);
* NIST (Doddington 2002, n = 5): NLTK's ``corpus_nist`` on :func:`tokenize`d text;
* METEOR: NLTK's ``meteor_score`` (exact, Porter-stem and WordNet-synonym matching), the mean over
  MRs of the best reference; needs the WordNet corpus (``dpaudit assets --wordnet``), and is left
  out, with a note, when it is missing. It approximates METEOR 1.5 (Java) of e2e-metrics, which uses
  paraphrase tables too, so its values run lower than the paper's;
* ROUGE-L F: rouge-score with stemming, best reference per MR, averaged;
* CIDEr-D (Vedantam et al. 2015, as in coco-caption): TF-IDF n-gram vectors (n = 1..4) with the
  document frequencies taken over the test references, clipped hypothesis weights, a Gaussian length
  penalty (sigma = 6), mean over references and n, times 10. Hand-written (coco-caption ships 100 MB
  of Java); tests check it against values from pycocoevalcap 1.2.

BLEU, NIST(x1), METEOR, ROUGE-L and CIDEr are reported on the scales of Li et al.'s Table 7: BLEU,
METEOR and ROUGE-L in percent, NIST and CIDEr raw.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Lower-cased words and punctuation marks."""
    return _TOKEN.findall(text.lower())


def bleu(hyps: list[str], refs: list[list[str]]) -> float:
    import sacrebleu

    width = max(len(r) for r in refs)
    streams = [[r[i] if i < len(r) else "" for r in refs] for i in range(width)]
    return float(sacrebleu.corpus_bleu(hyps, streams).score)


def nist(hyps: list[str], refs: list[list[str]], n: int = 5) -> float:
    from nltk.translate.nist_score import corpus_nist

    toks = [tokenize(h) for h in hyps]
    # orders longer than every hypothesis contribute nothing (mteval); NLTK would divide by zero on them
    n = min(n, max((len(t) for t in toks), default=0))
    if n == 0:
        return 0.0
    return float(corpus_nist([[tokenize(r) for r in rs] for rs in refs], toks, n=n))


def rouge_l(hyps: list[str], refs: list[list[str]]) -> float:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return 100.0 * float(np.mean([scorer.score_multi(r, h)["rougeL"].fmeasure for h, r in zip(hyps, refs)]))


def meteor(hyps: list[str], refs: list[list[str]]) -> float | None:
    """Mean sentence METEOR in percent, or None when the WordNet corpus is not installed."""
    from dpaudit.tasks import assets

    if assets.wordnet_dir() is None:
        return None
    from nltk.translate.meteor_score import meteor_score

    return 100.0 * float(np.mean([meteor_score([tokenize(r) for r in rs], tokenize(h)) for h, rs in zip(hyps, refs)]))


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i:i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1))


def cider_d(hyps: list[str], refs: list[list[str]], n: int = 4, sigma: float = 6.0,
            tokenizer=tokenize) -> float:
    """Corpus CIDEr-D: the mean over MRs of each hypothesis' CIDEr-D against its references."""
    if len(hyps) != len(refs) or not hyps:
        raise ValueError("cider_d needs one hypothesis per reference group, and at least one")
    ref_counts = [[_ngrams(tokenizer(r), n) for r in rs] for rs in refs]
    df: Counter = Counter()
    for rc in ref_counts:
        df.update(set().union(*[set(c) for c in rc]))
    log_n = math.log(float(len(refs)))

    def vec(counts: Counter):
        v = [dict() for _ in range(n)]
        for g, tf in counts.items():
            v[len(g) - 1][g] = tf * (log_n - math.log(max(1.0, df[g])))
        norms = [math.sqrt(sum(x * x for x in d.values())) for d in v]
        return v, norms

    scores = []
    for h, rcs in zip(hyps, ref_counts):
        hw = tokenizer(h)
        hv, hn = vec(_ngrams(hw, n))
        total = np.zeros(n)
        for rc in rcs:
            rv, rn = vec(rc)
            r_len = sum(tf for g, tf in rc.items() if len(g) == 1)
            penalty = math.exp(-((len(hw) - r_len) ** 2) / (2 * sigma ** 2))
            for k in range(n):
                dot = sum(min(w, rv[k].get(g, 0.0)) * rv[k].get(g, 0.0) for g, w in hv[k].items())
                if hn[k] and rn[k]:
                    total[k] += dot / (hn[k] * rn[k]) * penalty
        scores.append(10.0 * float(total.mean()) / len(rcs))
    return float(np.mean(scores))


def score(hyps: list[str], refs: list[list[str]]) -> dict:
    """Every metric above; ``meteor`` is absent (and ``notes`` says why) without WordNet."""
    out = {"bleu": bleu(hyps, refs), "nist": nist(hyps, refs), "rougeL": rouge_l(hyps, refs),
           "cider": cider_d(hyps, refs)}
    m = meteor(hyps, refs)
    if m is None:
        out["notes"] = ["METEOR left out: the WordNet corpus is not installed (run `dpaudit assets --wordnet`)"]
    else:
        out["meteor"] = m
    return out
