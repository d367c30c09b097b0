"""``dpaudit check REPORT --checkpoint CKPT --rescore`` on a post-hoc audit's report: its scores recomputed from the
model and the files the report names.

A post-hoc audit's units were never written: they come from the training data (natural identifiers) or the two
files of a stated split, whose paths and SHA-256 digests the report records. ``--checkpoint`` re-derives the
evidence from the report's scores (dpaudit/gate/rederive.py); with ``--rescore`` the files are read again (each
must still have its recorded digest), the units rebuilt by the same rules and seed
(dpaudit/evaluation/posthoc.py, posthoc_fit.py), scored by the model, and each unit's score must equal the report's
to float rounding (the tolerances of dpaudit/evaluation/rescore.py). Needs the training install (torch).
"""

from __future__ import annotations

from pathlib import Path

from dpaudit.errors import DpauditError

BATCH = 32


def loss_scores(report: dict, ckpt: Path) -> tuple[list | None, list[str]]:
    """(each audit unit's loss score as the model gives it, or None; what already differs) for post-hoc ``report``
    of ``ckpt``: None with a line where a file is not the one the report read."""
    from dpaudit.evaluation import posthoc, posthoc_fit

    ph = report["posthoc"]
    src = ph.get("sources") or {}
    ck = posthoc.load_without_manifest(Path(ckpt))
    model, tok = ck.load_model()
    posthoc.check_language_model(model, ckpt)
    limit = posthoc_fit.token_limit(ck)
    column = src.get("text_column") or "text"
    seed = src.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        return None, [f"the report's post-hoc seed {seed!r} is not one dpaudit draws with"]
    out: list[str] = []
    if ph["kind"] == posthoc.IDENTIFIER_KIND:
        texts = _read(posthoc, src.get("training_data"), src.get("sha256"), column, "training data", out)
        if texts is None:
            return None, out
        fmt = src.get("format")
        posthoc.pattern(fmt)  # a format the report cannot have been made with: one line
        pairs, dropped = posthoc.identifier_pairs(texts, fmt, seed)
        out += _said(ph, {"pairs": len(pairs)}, dropped)
        man, coins = posthoc.identifiers_manifest(pairs, seed, 0.1)
        scores = posthoc.pair_scores(model, tok, pairs, coins, BATCH, "tokenizer", limit) if pairs else []
    else:
        ins = _read(posthoc, src.get("members"), src.get("members_sha256"), column, "members", out)
        outs = _read(posthoc, src.get("non_members"), src.get("non_members_sha256"), column, "non-members", out)
        if ins is None or outs is None:
            return None, out
        from dpaudit.audit import auditor

        p = auditor.fair_coin_p(len(ins), len(outs))
        ins, outs, dropped = posthoc_fit.fit_split(tok, ins, outs, limit)
        out += _said(ph, {"fair_coin_p": p, "max_tokens": limit}, dropped)
        scores = posthoc.split_scores(ck, model, tok, posthoc.split_manifest(ins, outs, seed, 0.1), BATCH, limit)
    return list(scores), out


def _said(ph: dict, sources: dict, dropped: dict) -> list[str]:
    """One line when what the report says it read (``sources`` entries, the records it left out) is not what the
    files give now."""
    import math

    said = ph.get("sources") or {}
    wrong = [f"{k}: the report has {said.get(k)!r}, the files give {v!r}" for k, v in sources.items()
             if not (said.get(k) == v or (isinstance(v, float) and isinstance(said.get(k), (int, float))
                                          and not isinstance(said.get(k), bool) and math.isclose(float(said[k]), v)))]
    if ph.get("dropped") != dropped:
        wrong.append(f"records left out: the report has {ph.get('dropped')!r}, the files give {dropped!r}")
    return [f"the report's account of the files it read is not what they give now ({'; '.join(wrong)})"] if wrong else []


def _read(posthoc, path, digest, column: str, what: str, out: list[str]):
    """The texts of the file the report names, or None (with a line in ``out``) when it is not the file read then."""
    if not isinstance(path, str) or not path:
        out.append(f"the report names no {what} file to read again")
        return None
    if not Path(path).exists():
        raise DpauditError(f"--rescore reads the {what} the report names again, and {path} is not there; run it where "
                           "the audit ran, or check without --rescore")
    texts, got = posthoc.read_texts(Path(path), column)
    if got != digest:
        out.append(f"the {what} at {path} is not the file the report read (sha256 {str(digest)[:12]}…, now "
                   f"{got[:12]}…)")
        return None
    return texts

