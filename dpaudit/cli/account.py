"""``dpaudit account`` (the accounting check of a mechanism or a privacy card) and ``dpaudit card`` (write a
privacy card for a model trained by a stack that is not Opacus). Light: no torch."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit import options, progress
from dpaudit.errors import DpauditError
from dpaudit.io import write_atomic
from dpaudit.markup import probability


@click.command()
@click.option("--sigma", type=float, help="Noise multiplier σ (noise std / clipping norm).")
@click.option("--sample-rate", type=float, help="Poisson sampling rate q (Opacus: 1 / len(data_loader)).")
@click.option("--steps", type=int, help="Number of noisy steps T.")
@click.option("--delta", type=float, help="Target δ.")
@click.option("--card", type=click.Path(path_type=Path),
              help="Check the claim of a privacy_card.json: every accountant's interval for the true ε, and the "
                   "verdict. Exit 0 when the claim is verified, 1 when it is an under-claim or unverifiable.")
@click.option("--target-epsilon", type=float, help="Solve for σ reaching this ε instead of computing ε.")
@click.option("--accountants", default=",".join(options.GAUSSIAN_ACCOUNTANTS), show_default=True,
              help="Comma-separated accountants.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: ε keyed by accountant; with --card the whole "
              "accounting check (results with lower/upper, status as 'verdict').")
def account(sigma, sample_rate, steps, delta, card, target_epsilon, accountants, as_json):
    """Epsilon of Poisson-subsampled Gaussian DP-SGD under every accountant, side by side, or the accounting check
    of a privacy card (--card)."""
    from dpaudit import accounting

    names = [a.strip() for a in accountants.split(",") if a.strip()]
    if not names:
        raise DpauditError(f"--accountants names none; give one or more of {', '.join(accounting.GAUSSIAN_ACCOUNTANTS)}, "
                           "comma-separated")
    for n in names:
        if n not in accounting.GAUSSIAN_ACCOUNTANTS:
            raise DpauditError(f"unknown accountant {n!r}; choose from {', '.join(accounting.GAUSSIAN_ACCOUNTANTS)}")
    if card is not None:
        given = [f for f, v in (("--sigma", sigma), ("--sample-rate", sample_rate), ("--steps", steps),
                                ("--delta", delta), ("--target-epsilon", target_epsilon)) if v is not None]
        if given:
            raise DpauditError(f"{given[0]} cannot be combined with --card (the card states the mechanism)")
        _account_card(card, as_json)
        return
    for flag, val in (("--sigma", sigma if target_epsilon is None else 1.0), ("--sample-rate", sample_rate),
                      ("--steps", steps), ("--delta", delta)):
        if val is None:
            raise DpauditError(f"{flag} is required (or pass --card)")
    accounting.validate_delta(delta)
    if target_epsilon is not None:
        def answer(n):
            return accounting.calibrate_sigma(target_epsilon, delta, sample_rate, steps, n)
        title, symbol = f"σ reaching ε = {target_epsilon} at δ = {delta}, q = {sample_rate}, T = {steps}:", "σ"
    else:
        events = [accounting.SubsampledGaussian(sample_rate, sigma, steps)]

        def answer(n):
            return accounting.compute(events, delta, n).epsilon
        title, symbol = f"ε at δ = {delta}:", "ε"
    values, skipped = {}, {}
    bar = progress.bar(names, desc="accountants", unit=" accountant", disable=None)  # a tiny σ takes minutes in PRV
    for n in bar:
        bar.set_postfix_str(n)
        try:
            values[n] = answer(n)
        except accounting.NotApplicable as e:  # PRV/PLD at a tiny sigma (their grids need GBs); Opacus' without it
            skipped[n] = str(e)
    if not values:
        raise DpauditError(f"no accountant asked for can analyse this mechanism: {next(iter(skipped.values()))}")
    _per_accountant(values, as_json, title, symbol)
    if skipped and not as_json:
        for n, why in skipped.items():
            click.echo(f"  {n:8s} not applicable: {why}")


def _account_card(path: Path, as_json: bool) -> None:
    from dpaudit.claim.card import load_card
    from dpaudit.claim.reaccount import reaccount

    c = load_card(path)
    if not c.is_private:
        raise DpauditError(f"{path} claims no epsilon (non-private); nothing to account")
    acct = reaccount(c)
    if as_json:
        click.echo(json.dumps({"verdict": acct.status, **acct.as_dict()}))
    else:
        click.echo(f"claim: ε = {c.claim.epsilon:g} at δ = {probability(c.claim.delta)} ({c.claim.unit} level, "
                   f"{c.claim.neighbouring} neighbours)")
        for r in acct.results:
            lo = "     ?    " if r.lower is None else f"{r.lower:10.4f}"
            hi = "   ?" if r.epsilon is None else f"{r.epsilon:.4f}"
            click.echo(f"  {r.accountant:20s} ε in [{lo}, {hi}]  (δ = {probability(r.delta, 3)}) {r.detail}")
        for name, why in acct.not_applicable.items():
            click.echo(f"  {name:20s} not applicable: {why}")
        for f in acct.findings:
            click.echo(f"  finding: {f}")
        click.echo(f"{acct.status}: {acct.reason}")
    if acct.status != "verified":
        raise SystemExit(1)


def _per_accountant(values: dict, as_json: bool, title: str, symbol: str) -> None:
    if as_json:
        click.echo(json.dumps(values))
        return
    click.echo(title)
    for n, v in values.items():
        click.echo(f"  {n:8s} {symbol} = {v:.4f}")


_MECHANISM = ("--epsilon", "--delta", "--sigma", "--sample-rate", "--steps")


@click.command("card")
@click.option("--epsilon", type=float, help="The claimed ε (what your accountant reported). Required, but with --non-private.")
@click.option("--delta", type=float, help="The claimed δ. Required, but with --non-private.")
@click.option("--sigma", type=float, help="Noise multiplier σ (noise std / clipping norm). Required, but with --non-private.")
@click.option("--sample-rate", type=float,
              help="Sampling rate q per step (Opacus: 1 / len(data_loader), not batch / dataset size). Required, "
                   "but with --non-private.")
@click.option("--steps", type=int, help="Number of noisy steps T. Required, but with --non-private.")
@click.option("--sampler", type=click.Choice(options.SAMPLERS), default="poisson", show_default=True,
              help="How batches were really drawn: poisson (Opacus DPDataLoader), shuffle (fixed-size batches of a "
                   "shuffled epoch), with_replacement, other.")
@click.option("--neighbouring", type=click.Choice(options.NEIGHBOURING), default="add_remove", show_default=True,
              help="The neighbouring relation of the claim.")
@click.option("--unit", type=click.Choice(options.UNITS), default="record", show_default=True,
              help="What one neighbour differs by: a record, or all of a user's records.")
@click.option("--accountant", default="external", show_default=True,
              help=f"What produced the claim: {', '.join(options.ACCOUNTANTS)} or external.")
@click.option("--clipping-norm", type=float, help="Clipping norm C (recorded).")
@click.option("--batch-size", type=float, help="Expected batch size (checked against q x dataset size).")
@click.option("--dataset-size", type=int, help="Records (or users) in the training data.")
@click.option("--method", default="external", show_default=True, help="Training method (recorded).")
@click.option("--intended-epsilon", type=float, default=None,
              help="The ε the run was meant to spend (the target you trained for); recorded, and `dpaudit check` "
                   "fails a run whose claim spent more than it.")
@click.option("--probe-record", "probe_records", multiple=True, type=click.Path(path_type=Path), metavar="FILE",
              help="A gradient_canaries*.json the probe wrote during this run (repeatable): the card names its run "
                   "identity, so evaluate and check use the record as this model's evidence (a record the card does "
                   "not name is shown, never counted as the run's own).")
@click.option("--non-private", "non_private", is_flag=True,
              help="A model trained without noise (a baseline): a card with no claim, so that `dpaudit evaluate` "
                   "audits it beside the private ones; takes none of the five mechanism options above.")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="privacy_card.json to write.")
def card_cmd(epsilon, delta, sigma, sample_rate, steps, sampler, neighbouring, unit, accountant, clipping_norm,
             batch_size, dataset_size, method, intended_epsilon, probe_records, non_private, out):
    """Write privacy_card.json for a model trained with a stack that is not Opacus (one DP-SGD phase; for
    several phases use dpaudit.api.card_from_opacus or write the events list), or, with --non-private, the card
    of a baseline trained without noise."""
    from dpaudit.accounting.events import SubsampledGaussian
    from dpaudit.claim import card as cardmod

    given = dict(zip(_MECHANISM, (epsilon, delta, sigma, sample_rate, steps)))
    if non_private:
        extra = [f for f, v in [*given.items(), ("--intended-epsilon", intended_epsilon)] if v is not None]
        if extra:
            raise DpauditError(f"{extra[0]} describes a DP mechanism; --non-private writes a card with no claim "
                               "(drop one or the other)")
    else:
        missing = [f for f, v in given.items() if v is None]
        if missing:
            raise DpauditError(f"{missing[0]} is required (the card's claim and mechanism: {', '.join(_MECHANISM)}); "
                               "for a model trained without noise pass --non-private instead")
    if out.is_dir():
        raise DpauditError(f"{out} is a folder; name the file to write in it ({out / 'privacy_card.json'}: the name "
                           "dpaudit evaluate reads)")
    if not out.parent.is_dir():
        raise DpauditError(f"folder {out.parent} does not exist; create it first")
    claim = (cardmod.Claim(epsilon=None, delta=0.0, unit=unit, neighbouring=neighbouring, accountant="none")
             if non_private else
             cardmod.Claim(epsilon=epsilon, delta=delta, unit=unit, neighbouring=neighbouring, accountant=accountant))
    c = cardmod.PrivacyCard(
        claim=claim, events=[] if non_private else [SubsampledGaussian(sample_rate, sigma, steps, sampler)],
        clipping_norm=clipping_norm,
        expected_batch_size=batch_size, dataset_size=dataset_size, method=method,
        extra={"intended": {"epsilon": intended_epsilon, "source": "dpaudit card --intended-epsilon"}}
        if intended_epsilon is not None else {})
    if probe_records:
        from dpaudit.probe import record as probe_record

        c = probe_record.bind(c, [probe_record.run_id_of(f) for f in probe_records])
    c = cardmod.card_from_dict(c.to_dict(), "the card")  # every check a reader applies, before anything is written
    status = _claim_checked(c)
    write_atomic(out, lambda tmp: tmp.write_text(c.json_text()))
    if non_private:
        click.echo(f"{out}: no claim (a non-private baseline); `dpaudit evaluate` audits it as one")
        return
    click.echo(f"{out}: claim ε = {epsilon:g} at δ = {probability(delta)}; {status}")


def _claim_checked(c) -> str:
    """The card's claim accounted before it is written: a claim its own mechanism refutes (the accountants' lower
    value above it) is refused, never written for a gate to find later; otherwise the accounting's status, to say."""
    if not c.is_private:
        return "no claim (non-private)"
    try:
        from dpaudit.claim.reaccount import reaccount

        acct = reaccount(c)
    except ModuleNotFoundError:  # the gate's install holds no accountant: the card is written, said unchecked
        from dpaudit.install_hint import pip_command

        return (f"NOT accounted (this install has no accountant: {pip_command('audit')}); check it with `dpaudit "
                "account --card`")
    if acct.status == "under-claim":
        (e,) = c.events
        raise DpauditError(f"--epsilon {c.claim.epsilon:g} is an under-claim: {acct.reason}; write the ε your "
                           f"accountant gave for σ = {e.noise_multiplier:g}, q = {e.sample_rate:g}, T = {e.steps} "
                           f"(`dpaudit account --sigma {e.noise_multiplier:g} --sample-rate {e.sample_rate:g} --steps "
                           f"{e.steps} --delta {c.claim.delta:g}` gives every accountant's), or correct σ, q or T")
    return f"accounting {acct.status} (`dpaudit account --card` shows every accountant's interval)"
