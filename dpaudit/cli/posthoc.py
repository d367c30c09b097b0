"""``dpaudit audit identifiers`` and ``dpaudit audit split``: audits of a checkpoint trained without planted
canaries, each with its assumption written into the report beside the bound (dpaudit/evaluation/posthoc.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from dpaudit.errors import DpauditError

COMMON = [
    click.argument("checkpoint", type=click.Path(path_type=Path)),
    click.option("--out", required=True, type=click.Path(path_type=Path), help="Folder for REPORT.md and report.json."),
    click.option("--text-column", default="text", show_default=True,
                 help="The text field of the records (a JSONL field, a CSV/TSV column, a save_to_disk column)."),
    click.option("--guess-fraction", default=0.1, show_default=True, type=click.FloatRange(0.0, 1.0, min_open=True),
                 help="Member + non-member guesses as a fraction of the audit units, fixed before any score."),
    click.option("--confidence", default=0.95, show_default=True, type=click.FloatRange(0.5, 1.0, max_open=True),
                 help="Confidence of the lower bound."),
    click.option("--seed", default=0, show_default=True, type=click.IntRange(0),
                 help="Seed of dpaudit's own draws (fresh identifiers, pair coins); fix it before looking."),
    click.option("--batch-size", default=32, show_default=True, type=click.IntRange(min=1), help="Texts per forward pass."),
    click.option("--device", "device_name", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
    click.option("--quiet", is_flag=True, help="No progress bars."),
]


def common(f):
    for deco in reversed(COMMON):
        f = deco(f)
    return f


@click.command("identifiers")
@common
@click.option("--training-data", required=True, type=click.Path(path_type=Path),
              help="The data the model was trained on: a .jsonl/.json/.csv/.tsv/.parquet file, a datasets.save_to_disk folder (its "
                   "train split), or plain text (one record per line).")
@click.option("--format", "fmt", required=True,
              help="The identifiers' format, random by construction: uuid4, hexN (e.g. hex32) or digitsN (e.g. digits16).")
def identifiers_cmd(checkpoint, out, text_column, guess_fraction, confidence, seed, batch_size, device_name, quiet,
                    training_data, fmt):
    """Audit CHECKPOINT (a model folder with privacy_card.json and no canaries.json) through the random identifiers
    its training data holds: each one that occurs once is paired with a fresh draw of the same format, both scored
    in the identifier's own context; a fair coin drawn here labels each pair. Valid if every identifier was drawn
    uniformly from its format, independently of everything else: the report states it. The bound is of the record
    level claim through replace-one (a group of two records). Exit 0 once the report is written, 2 on bad input."""
    from dpaudit.evaluation import posthoc, posthoc_fit

    posthoc.pattern(fmt)  # the format before any work
    out, ck, model, tok = _prepare(checkpoint, out, device_name, quiet)
    texts, digest = posthoc.read_texts(training_data, text_column)
    pairs, dropped = posthoc.identifier_pairs(texts, fmt, seed)
    if len(pairs) < posthoc.MIN_UNITS:
        left = "; ".join(f"{n} {why}" for why, n in dropped.items() if n)
        raise DpauditError(f"{training_data} holds {len(pairs)} {fmt} identifiers to pair (at least "
                           f"{posthoc.MIN_UNITS} are needed for a bound{f'; left out: {left}' if left else ''}); "
                           "check --format, or audit with `dpaudit audit split`")
    man, coins = posthoc.identifiers_manifest(pairs, seed, guess_fraction, confidence)
    scores = posthoc.pair_scores(model, tok, pairs, coins, batch_size, "tokenizer", posthoc_fit.token_limit(ck))
    info = posthoc.Posthoc(
        kind=posthoc.IDENTIFIER_KIND,
        assumption=posthoc.assumption(posthoc.IDENTIFIER_KIND, fmt),
        sources={"training_data": str(training_data), "sha256": digest, "format": fmt, "pairs": len(pairs),
                 "seed": seed, "text_column": text_column}, dropped=dropped)
    _finish(checkpoint, man, scores, info, confidence, out)


@click.command("split")
@common
@click.option("--members", required=True, type=click.Path(path_type=Path),
              help="Records that were in the training data (as --training-data: JSONL/CSV/TSV, save_to_disk, or "
                   "one per line).")
@click.option("--non-members", required=True, type=click.Path(path_type=Path),
              help="Records that were held out of it by the same coin.")
@click.option("--fair-coin", is_flag=True,
              help="State that each record was put in or held out by an independent fair coin before training "
                   "(required: the bound rests on it, and the report says so).")
def split_cmd(checkpoint, out, text_column, guess_fraction, confidence, seed, batch_size, device_name, quiet, members,
              non_members, fair_coin):
    """Audit CHECKPOINT (a model folder with privacy_card.json and no canaries.json) on a member / held-out split
    you state was drawn by a fair coin per record before training: its records are the one-run game's canaries.
    A split by date, source or size is not a coin and gives no bound. Exit 0 once the report is written, 2 on bad
    input (a split far from half and half is refused: a fair coin rarely gives it)."""
    from dpaudit.audit import auditor
    from dpaudit.evaluation import posthoc, posthoc_fit

    if not fair_coin:
        raise DpauditError("the split audit is valid only if a fair coin put each record in or out before training; "
                           "state it with --fair-coin, or plant canaries for the next run (`dpaudit canaries new`)")
    ins, d_in = posthoc.read_texts(members, text_column)
    outs, d_out = posthoc.read_texts(non_members, text_column)
    if len(ins) + len(outs) < posthoc.MIN_UNITS or not ins or not outs:
        raise DpauditError(f"{len(ins)} members and {len(outs)} non-members: the audit needs both, at least "
                           f"{posthoc.MIN_UNITS} records in all")
    p = auditor.fair_coin_p(len(ins), len(outs))
    if p < auditor.FAIR_COIN_P:
        raise DpauditError(f"{len(ins)} members against {len(outs)} non-members: a fair coin gives a split this uneven "
                           f"with probability {p:.1g}; this split was not drawn by a fair coin, so it gives no bound")
    if set(ins) == set(outs):
        raise DpauditError("--members and --non-members hold the same records; each record is in or out")
    out, ck, model, tok = _prepare(checkpoint, out, device_name, quiet)
    limit = posthoc_fit.token_limit(ck)
    ins, outs, dropped = posthoc_fit.fit_split(tok, ins, outs, limit)
    if len(ins) + len(outs) < posthoc.MIN_UNITS or not ins or not outs:
        raise DpauditError(f"{len(ins)} members and {len(outs)} non-members are left to score (repeated records and "
                           f"records of one token are left out): the audit needs both, at least {posthoc.MIN_UNITS} "
                           "records in all")
    man = posthoc.split_manifest(ins, outs, seed, guess_fraction, confidence)
    scores = posthoc.split_scores(ck, model, tok, man, batch_size, limit)
    info = posthoc.Posthoc(
        kind=posthoc.SPLIT_KIND,
        assumption=posthoc.assumption(posthoc.SPLIT_KIND),
        sources={"members": str(members), "members_sha256": d_in, "non_members": str(non_members),
                 "non_members_sha256": d_out, "fair_coin_p": p, "max_tokens": limit, "seed": seed,
                 "text_column": text_column}, dropped=dropped)
    _finish(checkpoint, man, scores, info, confidence, out)


def _prepare(checkpoint, out, device_name, quiet):
    from dpaudit import device, progress
    from dpaudit.evaluation import posthoc
    from dpaudit.io import REPORT_FILES, check_out

    progress.set_quiet(quiet)
    target = device.resolve(device_name, "--device")
    out = check_out(out, [checkpoint], outputs=REPORT_FILES)
    ck = posthoc.load_without_manifest(checkpoint)
    model, tok = ck.load_model()
    posthoc.check_language_model(model, checkpoint)
    return out, ck, model.to(target), tok


def _finish(checkpoint, man, scores, info, confidence, out) -> None:
    from dpaudit.evaluation import posthoc
    from dpaudit.io import printable
    from dpaudit.report import write as report

    r = posthoc.audit(checkpoint, man, scores, info, confidence=confidence,
                      command="dpaudit " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    report.write(r, out)
    click.echo(printable(f"{r['verdict']['status']}: {r['verdict']['reason']}"))
    click.echo(printable(f"assumption: {info.assumption}"))
    click.echo(f"report: {Path(out) / 'REPORT.md'}")
