"""``dpaudit canaries``: canaries for a model trained with any tool, made before training. Light: no torch."""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit import options
from dpaudit.errors import DpauditError
from dpaudit.io import write_atomic


@click.group()
def canaries():
    """Canaries for a model trained with any tool: make them before training, insert them into its data."""


@canaries.command("new")
@click.option("--m", "m", required=True, type=int, help="Number of canaries; each is inserted or held out by a fair "
              "coin (about m/2 inserted). The audit's ceiling grows with m: see `dpaudit audit one-run`.")
@click.option("--repetitions", default=1, show_default=True, type=int,
              help="Copies of each inserted canary in the training data (more copies: easier to detect, but the "
                   "audit is then one of group privacy and its bound is divided by this).")
@click.option("--seed", type=int, default=None, help="Seed of the secrets and coins (default: a fresh random one, "
              "recorded in the manifest).")
@click.option("--template", default="My account number is {secret}.", show_default=True,
              help="Canary text; must contain {secret} once.")
@click.option("--alphabet", default="0123456789", show_default=True, help="Symbols of the secret.")
@click.option("--length", default=6, show_default=True, type=int, help="Symbols per secret (randomness space "
              "alphabet^length).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Manifest to write (canaries.json): which canaries are inserted, and the audit plan, fixed now.")
@click.option("--records", type=click.Path(path_type=Path),
              help="Also write the records to insert as JSONL, one {\"text\": ...} per line, each inserted canary "
                   "repeated --repetitions times (shuffle them into your training data).")
@click.option("--force", is_flag=True, help="Overwrite existing files (a manifest must never change after training).")
@click.option("--attacks", default=",".join(options.ATTACKS), show_default=True,
              help="Evaluation plan: the attacks `dpaudit evaluate` will audit (fixed now, before training).")
@click.option("--rule", type=click.Choice(options.RULES), default="bonferroni", show_default=True,
              help="Evaluation plan: how the one-run audit's choices stay valid.")
@click.option("--confidence", default=0.95, show_default=True, type=float,
              help="Evaluation plan: family-wise confidence of the audit.")
@click.option("--references", "n_references", default=2000, show_default=True, type=int,
              help="Evaluation plan: reference secrets for exposure ranks (when the space is not enumerated).")
def canaries_new(m, repetitions, seed, template, alphabet, length, out, records, force, attacks, rule, confidence,
                 n_references):
    """Write a canary manifest (and the records to insert) before training, for any trainer."""
    from dpaudit import canaries as can
    from dpaudit import planting

    for path in (out, records):
        if path is not None and path.exists() and not force:
            raise DpauditError(f"{path} exists; a canary manifest must not change once a model trained on it "
                               "(pass --force to overwrite)")
        if path is not None and not path.parent.is_dir():
            raise DpauditError(f"folder {path.parent} does not exist; create it first")
    man = can.new(m, repetitions, seed, template, alphabet, length,
                  attacks=[a.strip() for a in attacks.split(",") if a.strip()], rule=rule, confidence=confidence,
                  n_references=n_references)
    write_atomic(out, man.save)
    n = planting.write_records(man, records) if records is not None else None
    k_pos, k_neg = man.plan.guesses
    click.echo(f"{out}: {m} canaries, {len(man.inserted)} to insert x {repetitions} (seed {man.plan.seed}); "
               f"audit plan fixed: {k_pos} member + {k_neg} non-member guesses; evaluation: {attacks}, {rule}, "
               f"confidence {confidence:g}, {n_references} references")
    if n is not None:
        click.echo(f"{records}: {n} records to shuffle into the training data")
