"""Audits of a checkpoint trained without planted canaries: what can be said honestly, with its assumption stated.

Most DP checkpoints that exist were trained without canaries. Two sources of membership evidence stand in for them,
each valid under one assumption the user states and the report prints beside every bound:

* **Natural identifiers** (``dpaudit audit identifiers``; the post-hoc audit of natural identifiers, ICLR 2026):
  strings in the training data that are random by construction (UUID4s, hex keys, digit codes). Each identifier
  that occurs once in the data is paired with a fresh draw of the same format that was never in the data, scored in
  the same context. *Assumption*: every identifier was drawn uniformly at random from its format, independently of
  everything else. Then the two members of a pair are exchangeable a priori: labelling them A and B by a fair coin
  that dpaudit draws, "A was in the data" is that coin, and the datasets with A or with B differ by replacing one
  record: two add/remove steps. The one-run audit over the pairs (score: A's log-likelihood minus B's in the same
  context) therefore bounds (2 epsilon, (1 + e^epsilon) delta)-DP: each pair is an audit unit of group size 2, and
  the reported bound is divided by 2.
* **A stated random split** (``dpaudit audit split``): records the user says were each put in the training data,
  or held out, by an independent fair coin before training. *Assumption*: that coin, independent of everything
  else. Then the records are canaries of the one-run game as planted ones are. A split far from half and half is
  refused (a fair coin rarely gives it); a split chosen by time, source or size is not a coin and gives no bound.

Both fix their guesses from the number of units alone (``guess_fraction``, before any score exists) and run through
the evaluation's audit, judge and render steps (dpaudit/evaluation/steps.py), with one outputs-only test (LOSS).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpaudit import checkpoint
from dpaudit.canaries.design import Canary, CanaryPlan
from dpaudit.canaries.manifest import Manifest
from dpaudit.errors import DpauditError
from dpaudit.evaluation import identifier_checks
from dpaudit.evaluation import posthoc_fit as fitting

FORMATS = {"uuid4": r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"}
FORMAT_HELP = "uuid4, hexN (N lowercase hex digits, 16 to 128) or digitsN (N decimal digits, 12 to 64)"
CONTEXT_CHARS = 200  # characters of the record before an identifier that score it (the fresh draw in the same)
MIN_UNITS = 20
IDENTIFIER_KIND, SPLIT_KIND = "natural identifiers", "stated random split"  # report.json's posthoc.kind


@dataclass(frozen=True)
class Posthoc:
    """What a post-hoc audit rests on: its kind, the assumption the report prints beside its bounds, and the
    digests of the files it read (the report records them)."""

    kind: str
    assumption: str
    sources: dict
    dropped: dict

    def to_dict(self) -> dict:
        return {"kind": self.kind, "assumption": self.assumption, "sources": self.sources, "dropped": self.dropped}


def assumption(kind: str, fmt: str | None = None) -> str:
    """The assumption a post-hoc audit of ``kind`` rests on, as its report prints it beside every bound (``fmt``:
    the identifiers' format); ``dpaudit check --checkpoint`` derives it again from the kind."""
    if kind == IDENTIFIER_KIND:
        return (f"every {fmt} identifier in the training data was drawn uniformly at random from its format, "
                "independently of the rest of the record and of the training; each pair (the identifier, a fresh draw "
                "never in the data, in its case, scored in the same context) is then exchangeable, and the bound is "
                "of replace-one privacy read as a group of two records")
    return ("each record was put in the training data or held out by an independent fair coin before training "
            "(stated by the user, not verified: a split by date, source or length gives no valid bound)")


def pattern(fmt: str) -> str:
    """The regular expression of one identifier format (lowercase, whole tokens)."""
    if fmt in FORMATS:
        return FORMATS[fmt]
    m = re.fullmatch(r"(hex|digits)(\d+)", fmt or "")
    if m:
        n = int(m.group(2))
        lo, hi = (16, 128) if m.group(1) == "hex" else (12, 64)
        if lo <= n <= hi:
            return f"[0-9a-f]{{{n}}}" if m.group(1) == "hex" else f"[0-9]{{{n}}}"
    raise DpauditError(f"unknown identifier format {fmt!r}; use {FORMAT_HELP} (shorter ones are not random enough "
                       "for a fresh draw to be new)")


def draw(fmt: str, rng: random.Random) -> str:
    """One fresh identifier of ``fmt``, uniform over the format (UUID4: 122 random bits)."""
    if fmt == "uuid4":
        b = bytearray(rng.getrandbits(8) for _ in range(16))
        b[6] = (b[6] & 0x0F) | 0x40
        b[8] = (b[8] & 0x3F) | 0x80
        h = b.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    kind, n = re.fullmatch(r"(hex|digits)(\d+)", fmt).groups()  # type: ignore[union-attr]
    alphabet = "0123456789abcdef" if kind == "hex" else "0123456789"
    return "".join(rng.choice(alphabet) for _ in range(int(n)))


DATA_HINT = ("pass the training data as a .jsonl/.json/.csv/.tsv/.parquet file with a text column (--text-column), a "
             "datasets.save_to_disk folder, or plain text (one record per line)")


def read_texts(path: Path, column: str = "text") -> tuple[list[str], str]:
    """(the records' texts, the sha256 of what was read): field ``column`` of each row of a .jsonl/.json/.csv/.tsv/.parquet file
    (dpaudit.tasks.files.read_rows, the reader of every task's data) or of a ``datasets.save_to_disk`` folder (its
    train split; the digest is of its texts), else each line of a text file."""
    from dpaudit.tasks.files import SUFFIXES, lines, read_rows

    path = Path(path)
    if path.is_dir() and any((path / f).exists() for f in ("dataset_dict.json", "dataset_info.json")):
        return _texts_of_dataset(path, column)
    if not path.is_file():
        raise DpauditError(f"{path} is not a file; {DATA_HINT}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if path.suffix in SUFFIXES:
        rows = read_rows(path, "training data", DATA_HINT)
        return [_text_of(row, column, f"{path}: row {i}") for i, row in enumerate(rows, 1)], digest
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DpauditError(f"{path} is not UTF-8 text; save it as UTF-8") from None
    return [ln for ln in lines(text) if ln.strip()], digest


def _text_of(row: dict, column: str, where: str) -> str:
    from dpaudit.tasks.data_source import column_names

    if column in row and not isinstance(row[column], str):
        raise DpauditError(f"{where}: its field {column!r} is not text (a {type(row[column]).__name__}); the post-hoc "
                           "audits read one text field per record: write chat messages or token ids out as the text "
                           "the model was trained on, in a column of their own")
    if not isinstance(row.get(column), str):
        raise DpauditError(f"{where} has no text field {column!r} (its fields: {column_names(list(row))}); pass "
                           "--text-column naming it")
    return row[column]


def _texts_of_dataset(path: Path, column: str) -> tuple[list[str], str]:
    import datasets

    from dpaudit.tasks.data_source import column_names

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds and len(ds) != 1:
            raise DpauditError(f"{path}: no 'train' split among {', '.join(ds)}; the audit reads the training data")
        ds = ds["train"] if "train" in ds else next(iter(ds.values()))
    if column not in ds.column_names:
        raise DpauditError(f"{path} has no column {column!r} (its columns: {column_names(ds.column_names)}); pass "
                           "--text-column naming it")
    texts = list(ds[column])  # a datasets Column, read out
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise DpauditError(f"{path}: row {bad + 1} of {column!r} is not text; pass --text-column naming a text column")
    return texts, hashlib.sha256(json.dumps(texts).encode()).hexdigest()


def identifier_pairs(texts: list[str], fmt: str, seed: int) -> tuple[list[tuple[str, str, str]], dict]:
    """(pairs (context, identifier in the data, fresh draw), what was left out and why): each identifier of
    ``fmt`` that occurs exactly once in ``texts`` (case-insensitive), with up to CONTEXT_CHARS characters of its
    record before it, paired with a fresh draw never seen in the data, written in the identifier's own case
    (upper or lower: a draw in the other case would differ from it by its case, not by membership, and a model
    that learnt the data's case from any text would tell them apart). Identifiers of mixed case are left out: their
    case is not known to be random."""
    rx = re.compile(rf"(?<![0-9a-zA-Z]){pattern(fmt)}(?![0-9a-zA-Z])", re.IGNORECASE)
    found: dict[str, list[tuple[int, int, str]]] = {}
    for i, t in enumerate(texts):  # matched in the text itself: its positions are the record's (no lower() copy)
        for m in rx.finditer(t):
            found.setdefault(m.group(0).lower(), []).append((i, m.start(), m.group(0)))
    identifier_checks.check_uniform(fmt, list(found))  # before any score: only uniform draws of the format
    once = {k: v[0] for k, v in found.items() if len(v) == 1}
    mixed = {k for k, (_, _, raw) in once.items() if raw != raw.lower() and raw != raw.upper()}
    rng = random.Random(seed)
    pairs, seen = [], set(found)
    for ident, (i, at, raw) in sorted(once.items(), key=lambda kv: kv[1][:2]):
        if ident in mixed:
            continue
        fresh = draw(fmt, rng)
        while fresh in seen:
            fresh = draw(fmt, rng)
        seen.add(fresh)
        pairs.append((texts[i][max(0, at - CONTEXT_CHARS):at], raw, fresh.upper() if raw != raw.lower() else fresh))
    return pairs, {"repeated identifiers (a group, not one record)": len(found) - len(once),
                   "identifiers of mixed case (their case is not known to be random)": len(mixed)}


def _plan(m: int, guess_fraction: float, seed: int, confidence: float = 0.95) -> CanaryPlan:
    """The audit's plan: the command's own, its --confidence included (no manifest was fixed before training)."""
    from dpaudit.canaries import plan as eval_plan

    return CanaryPlan(m=m, prefix="", suffix="", alphabet="0123456789abcdef", length=16, seed=seed,
                      guess_fraction=guess_fraction,
                      evaluation=eval_plan.planned(["loss"], "bonferroni", confidence, 2000))


def identifiers_manifest(pairs, seed: int, guess_fraction: float,
                         confidence: float = 0.95) -> tuple[Manifest, np.ndarray]:
    """The pairs as one-run audit units (a Manifest held in memory, never written: each unit's text is A in its
    context, its coin says whether A was in the data, its group size is 2) and dpaudit's coins."""
    coins = np.random.default_rng([seed, 11]).integers(0, 2, size=len(pairs)).astype(bool)
    canaries = [Canary(id=f"pair{i}", text=ctx + (real if c else fresh), secret=real if c else fresh, inserted=bool(c),
                       sign=1 if c else -1, repetitions=2 if c else 0)
                for i, ((ctx, real, fresh), c) in enumerate(zip(pairs, coins))]
    return Manifest(_plan(len(pairs), guess_fraction, seed, confidence), canaries), coins


def split_manifest(members: list[str], held_out: list[str], seed: int, guess_fraction: float,
                   confidence: float = 0.95) -> Manifest:
    """The stated split as canaries: members inserted once, held-out records not, in an order drawn from ``seed``
    (never members first: nothing downstream may read membership from a position)."""
    canaries = [Canary(id=f"m{i}", text=t, secret=t, inserted=True, sign=1, repetitions=1) for i, t in enumerate(members)]
    canaries += [Canary(id=f"h{i}", text=t, secret=t, inserted=False, sign=-1, repetitions=0)
                 for i, t in enumerate(held_out)]
    order = np.random.default_rng([seed, 13]).permutation(len(canaries))
    return Manifest(_plan(len(canaries), guess_fraction, seed, confidence), [canaries[i] for i in order])


def split_scores(ck, model, tok, man: Manifest, batch_size: int, limit: int) -> np.ndarray:
    """Each unit's LOSS score of the split manifest ``man``, as ``audit split`` and its ``--rescore`` read it."""
    from dpaudit.evaluation import scoring

    loaded = checkpoint.Checkpoint(ck.path, ck.card, man, ck.run, base_model=ck.base_model)
    settings = scoring.ScoringSettings(("loss",), batch_size, limit, framing="tokenizer")
    return scoring.score(loaded, model, tok, settings).scores["loss"]


def pair_scores(model, tok, pairs, coins, batch_size: int, framing: str, limit: int = fitting.MAX_TOKENS) -> np.ndarray:
    """Per pair: A's mean log-probability minus B's, each scored on the identifier's tokens in the same context
    (cut from the left where the two would not fit in ``limit`` tokens)."""
    from dpaudit.attacks.scoring import token_features

    a = [real if c else fresh for (_, real, fresh), c in zip(pairs, coins)]
    b = [fresh if c else real for (_, real, fresh), c in zip(pairs, coins)]
    texts, spans = [], []
    for (ctx, _, _), x, y in zip(pairs, a, b):
        ctx = fitting.fit_context(tok, ctx, x, y, limit)
        texts += [ctx + x, ctx + y]
        spans += [(len(ctx), len(ctx) + len(x)), (len(ctx), len(ctx) + len(y))]
    feats = token_features(model, tok, texts, batch_size=batch_size, framing=framing, spans=spans)
    mean = np.array([float(f.logp.mean()) if f is not None and f.logp.numel() else math.nan for f in feats])
    if not np.isfinite(mean).all():
        raise DpauditError("an identifier was not scored (cut by the model's context?); shorten the records")
    return mean[0::2] - mean[1::2]


def audit(ckpt_dir: Path, man: Manifest, scores: np.ndarray, posthoc: Posthoc, *, confidence: float = 0.95,
          command: str | None = None) -> dict:
    """The report of the post-hoc audit: ``scores`` (one per unit of ``man``, higher = member) through the
    evaluation's audit, judge and render steps, with ``posthoc`` (its assumption) in the report."""
    from dpaudit.claim.reaccount import reaccount
    from dpaudit.evaluation import scoring, steps
    from dpaudit.evaluation.options import EvalOptions

    ck0 = load_without_manifest(ckpt_dir)
    ck = checkpoint.Checkpoint(ck0.path, ck0.card, man, ck0.run, base_model=ck0.base_model)
    opts = EvalOptions(confidence=confidence).resolve(man, "tokenizer", "option")
    loaded = steps.Loaded(ck, opts, ck.card.audited_mechanism(), None, reaccount(ck.card))
    scored = steps.Scored({}, scoring.CanaryScores({"loss": np.asarray(scores, dtype=float)}), {})
    r = steps.finish(loaded, scored, command)
    r["posthoc"] = posthoc.to_dict()
    r["canary_plan"]["design"] = posthoc.kind
    return r


def units_from_report(report: dict) -> Manifest:
    """The audit units of a post-hoc report, rebuilt for ``dpaudit check --checkpoint`` (they were held in memory,
    never written): one unit per score, its membership from the report's signs, its group size from the audit's
    kind, the guess counts from the report's plan. For natural identifiers the coins are dpaudit's own draws, so
    they are drawn again from the recorded seed and must be the report's; a stated split's membership is what the
    user's files said (taken from the report: the files' digests are recorded beside it)."""
    ph, plan = report.get("posthoc") or {}, report.get("canary_plan") or {}
    loss = (report.get("attacks") or {}).get("loss") or {}
    signs, m = loss.get("signs"), plan.get("m")
    if ph.get("kind") not in (IDENTIFIER_KIND, SPLIT_KIND):
        raise DpauditError(f"the report's post-hoc kind {ph.get('kind')!r} is not one dpaudit writes")
    if not isinstance(m, int) or isinstance(m, bool) or not isinstance(signs, list) or len(signs) != m \
            or any(s not in (1, -1) or isinstance(s, bool) for s in signs):
        raise DpauditError("the report's loss signs are not one +1/-1 per audit unit of its plan")
    k = plan.get("k_pos", 0) + plan.get("k_neg", 0) if isinstance(plan.get("k_pos"), int) else 0
    seed = (ph.get("sources") or {}).get("seed", 0)
    if ph["kind"] == IDENTIFIER_KIND:
        coins = np.random.default_rng([seed, 11]).integers(0, 2, size=m).astype(bool) \
            if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else None
        if coins is None or (np.where(coins, 1, -1) != np.asarray(signs)).any():
            raise DpauditError(f"the report's membership signs are not the coins its seed {seed!r} draws for {m} "
                               "identifier pairs: the report was edited after it was written")
    reps = 2 if ph["kind"] == IDENTIFIER_KIND else 1
    units = [Canary(id=f"u{i}", text=f"unit {i}", secret=f"unit {i}", inserted=s > 0, sign=int(s),
                    repetitions=reps if s > 0 else 0) for i, s in enumerate(signs)]
    used = (report.get("audit_plan") or {}).get("used")
    confidence = used.get("confidence") if isinstance(used, dict) else None
    confidence = confidence if isinstance(confidence, float) and 0.5 <= confidence < 1 else 0.95  # else: departs
    return Manifest(_plan(m, k / m if m else 0.0, seed if isinstance(seed, int) else 0, confidence), units)


def check_language_model(model, path) -> None:
    """The post-hoc audits score a causal language model's likelihood of text: refuse a classifier in one line."""
    from dpaudit.tasks.models import is_classifier

    if is_classifier(model):
        raise DpauditError(f"{path} is a sequence classifier, and the post-hoc audits score a language model's "
                           "likelihood of text; audit a classifier with labelled canaries planted before training "
                           "(canaries.labels in a `dpaudit run` config)")


def load_without_manifest(path: Path) -> checkpoint.Checkpoint:
    """A checkpoint folder's card, run record and model, with no units yet (the post-hoc audits make their own);
    refused, as :func:`dpaudit.checkpoint.load` refuses a folder without a model or card, and for a folder with
    planted canaries (their audit was planned before training: ``dpaudit evaluate``)."""
    path = Path(path)
    if (path / "canaries.json").is_file():
        raise DpauditError(f"{path} has planted canaries (canaries.json): audit them with `dpaudit evaluate {path}`, "
                           "whose plan was fixed before training")
    return checkpoint.load(path, manifest=Manifest(_plan(2, 0.5, 0), []))
