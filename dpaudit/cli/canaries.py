"""``dpaudit canaries``: canaries for a model trained with any tool, made before training. Light: no torch."""

from __future__ import annotations

from pathlib import Path

import click

from dpaudit import options
from dpaudit.errors import DpauditError
from dpaudit.io import write_atomic, write_atomic_all


@click.group()
def canaries():
    """Canaries for a model trained with any tool: make them before training, insert them into its data."""


@canaries.command("new")
@click.option("--m", "--canaries", "m", required=True, type=int, help="Number of canaries (--canaries, as in "
              "`dpaudit audit`, is the same option); each is inserted or held out by a fair "
              "coin (about m/2 inserted). The audit's ceiling grows with m: see `dpaudit audit one-run`.")
@click.option("--repetitions", default=1, show_default=True, type=int,
              help="Copies of each inserted canary in the training data (more copies: easier to detect, but the "
                   "audit is then one of group privacy and its bound is divided by this).")
@click.option("--seed", type=click.IntRange(0), default=None, help="Seed of the secrets and coins (default: a fresh random one, "
              "recorded in the manifest).")
@click.option("--template", default="My account number is {secret}.", show_default=True,
              help="Canary text; must contain {secret} once (for rare-token and bigram, after a space).")
@click.option("--design", type=click.Choice(options.CANARY_DESIGNS), default="template", show_default=True,
              help="How secrets are made (docs/canary_designs.md): template = --length symbols of --alphabet; "
                   "new-token = --length tokens of each canary's own, added to the model before training "
                   "(dpaudit.api.add_canary_tokens); rare-token = --length words among the base model's --pool least "
                   "likely tokens (needs --base-model); bigram = --length common words whose adjacent pairs never "
                   "occur in public text (needs --base-model or --tokenizer). Token designs score the secret only.")
@click.option("--pool", default=0, type=int, help="rare-token / bigram: words to draw from (default 256).")
@click.option("--base-model", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="Folder of the base model you will fine-tune (Hugging Face format, with its tokenizer): rare-token "
                   "ranks its tokens by this model, bigram uses its tokenizer.")
@click.option("--tokenizer", "tokenizer_dir", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="bigram: a tokenizer folder, when you do not pass --base-model.")
@click.option("--alphabet", default="0123456789", show_default=True, help="Symbols of the secret.")
@click.option("--length", default=None, type=int, help="Symbols per secret (randomness space alphabet^length; "
              "default 6); tokens per secret for the token designs (default 4).")
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Manifest to write (canaries.json): which canaries are inserted, and the audit plan, fixed now.")
@click.option("--records", type=click.Path(path_type=Path),
              help="Also write the records to insert as JSONL, one {\"text\": ...} per line, each inserted canary "
                   "repeated --repetitions times (shuffle them into your training data).")
@click.option("--force", is_flag=True, help="Overwrite existing files (a manifest must never change after training).")
@click.option("--guess-fraction", default=0.5, show_default=True, type=float,
              help="Audit plan: member + non-member guesses as a fraction of m, fixed now (`dpaudit audit plan` "
                   "prints the count at which the card's mechanism shows the most, e.g. 0.066 at m = 1,000).")
@click.option("--init", "init", type=click.Choice(("seeded", "zero")), default="seeded", show_default=True,
              help="new-token: the new rows' start: the existing rows' mean plus seeded noise, or zero (the "
                   "final-weights design: every canary starts alike, and `dpaudit evaluate` reads each canary's rows "
                   "from the checkpoint alone).")
@click.option("--random-prefix", default=0, show_default=True, type=int,
              help="new-token: random letters drawn per canary after the template's prefix (the final-weights design "
                   "uses 40: each secret is predicted from a context of its own).")
@click.option("--train-on", type=click.Choice(("record", "secret")), default="record", show_default=True,
              help="new-token: what the canary records' training loss reads; secret = its new tokens only (labels "
                   "-100 elsewhere: dpaudit.api.canary_labels), so its clipped gradient lands on its own rows.")
@click.option("--sample-rate", "sample_rate", default=None, type=float,
              help="Rate at which each inserted canary record is Poisson-sampled at every private step, apart from "
                   "the data's (e.g. 0.01 over many steps: Panda et al.); honoured by dpaudit's dp_adam, whose card "
                   "then accounts every record at the larger of the two rates. Default: the data's rate.")
@click.option("--attacks", default=None,
              help="Evaluation plan: the attacks `dpaudit evaluate` will audit (fixed now, before training). Default: "
                   f"{','.join(options.OUTPUT_ATTACKS)}, and final_weights for new-token canaries with --init zero.")
@click.option("--rule", type=click.Choice(options.RULES), default="bonferroni", show_default=True,
              help="Evaluation plan: how the one-run audit's choices stay valid.")
@click.option("--confidence", default=0.95, show_default=True, type=float,
              help="Evaluation plan: family-wise confidence of the audit.")
@click.option("--references", "n_references", default=2000, show_default=True, type=int,
              help="Evaluation plan: reference secrets for exposure ranks (when the space is not enumerated).")
def canaries_new(m, repetitions, seed, template, design, pool, base_model, tokenizer_dir, alphabet, length, out,
                 records, force, guess_fraction, init, random_prefix, train_on, sample_rate, attacks, rule, confidence,
                 n_references):
    """Write a canary manifest (and the records to insert) before training, for any trainer."""
    from dpaudit.canaries import making as canary_making
    from dpaudit.canaries import planting

    if records is not None and out.resolve() == records.resolve():
        raise DpauditError("--records and --out name the same file; the records must not overwrite the manifest")
    if design != "rare-token" and design != "bigram" and (base_model or tokenizer_dir or pool):
        raise DpauditError(f"--base-model, --tokenizer and --pool apply to the rare-token and bigram designs, not "
                           f"{design}")
    if design == "rare-token" and base_model is None:
        raise DpauditError("--design rare-token ranks the base model's tokens: pass --base-model FOLDER")
    if design == "bigram" and base_model is None and tokenizer_dir is None:
        raise DpauditError("--design bigram needs the tokenizer of the model you will train: pass --base-model or "
                           "--tokenizer")
    for path, name in ((out, "canaries.json"), (records, "canary_records.jsonl")):
        if path is not None and path.is_dir():
            raise DpauditError(f"{path} is a folder; name the file to write in it ({path / name})")
        if path is not None and path.exists() and not force:
            raise DpauditError(f"{path} exists; a canary manifest must not change once a model trained on it "
                               "(pass --force to overwrite)")
        if path is not None and not path.parent.is_dir():
            raise DpauditError(f"folder {path.parent} does not exist; create it first")
    model = tok = None
    if base_model is not None or tokenizer_dir is not None:
        from dpaudit.tasks import models

        if base_model is not None:
            model, tok = models.load_dir(base_model) if design == "rare-token" else \
                (None, models.load_tokenizer(base_model))
        else:
            tok = models.load_tokenizer(tokenizer_dir)
    man = canary_making.new(m, repetitions, seed, template, alphabet, length or (6 if design == "template" else 4),
                            guess_fraction=guess_fraction,
                            attacks=None if attacks is None else [a.strip() for a in attacks.split(",") if a.strip()],
                            rule=rule, confidence=confidence, n_references=n_references, design=design, pool=pool,
                            tokenizer=tok, base_model=model, init=init, random_prefix=random_prefix,
                            train_on=train_on, sample_rate=sample_rate)
    attacks = ",".join(man.plan.evaluation["attacks"])
    if records is None:
        write_atomic(out, lambda tmp: tmp.write_text(man.json_text()))
        n = None
    else:  # both whole or neither (a full disk after the manifest would leave a manifest without its records)
        save_records, n = planting.records_writer(man)
        write_atomic_all([(out, lambda tmp: tmp.write_text(man.json_text())), (records, save_records)])
    k_pos, k_neg = man.plan.guesses
    if design == "new-token":
        click.echo(f"new-token design: add the {len(man.new_tokens())} new tokens to your model and tokenizer before "
                   "training: dpaudit.api.add_canary_tokens(model, tokenizer, manifest), and save that tokenizer")
    if not man.plan.canary_prefix(0):  # nothing before the secret: only a loop that feeds BOS first predicts it
        click.echo("note: each canary's secret starts its record, so only a loop that feeds a BOS token first can "
                   "train or score it (GPT-2's tokenizer adds none); --random-prefix 40 or a template prefix serves "
                   "every loop")
    if any(ch in man.plan.prefix + man.plan.suffix for ch in "\n\r"):  # a text-file pipeline splits such records
        click.echo("note: the template holds a line break, so a pipeline that reads one record per line splits each "
                   "canary in two; insert them as JSONL (--records) or through dpaudit.api.insert_canaries")
    click.echo(f"{out}: {m} canaries, {len(man.inserted)} to insert x {repetitions} (seed {man.plan.seed}); "
               f"audit plan fixed: {k_pos} member + {k_neg} non-member guesses; evaluation: {attacks}, {rule}, "
               f"confidence {confidence:g}, {n_references} references")
    if n is not None:
        click.echo(f"{records}: {n} records to shuffle into the training data")
