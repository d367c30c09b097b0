"""The ``dpaudit`` command line. Exit codes: 0 success, 1 a check failed, 2 bad input.

One file on purpose (about 300 lines): every command is a thin click wrapper whose options and help text
are the user-facing contract; the work happens in the modules each command imports lazily, so that light
commands (check, compare, audit) never load torch.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from dpaudit import checks, options
from dpaudit.errors import DpauditError, first_line
from dpaudit.io import check_out, write_atomic


def _command_line() -> str:
    return "dpaudit " + " ".join(shlex.quote(a) for a in sys.argv[1:])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dpaudit")
def cli():
    """dpaudit: does a DP fine-tuned model keep the privacy promise written on it?

    Audit a model trained anywhere: make canaries before training (`canaries new`), write its privacy
    card (`card`), audit it (`evaluate`). Train reference DP models (`run`), gate CI on a report (`check`),
    diff two reports (`compare`), check a claim's accounting (`account`), compute audit bounds (`audit`),
    and check which offline assets are present (`assets`).
    """


@cli.command()
@click.option("--convert", is_flag=True, help="Also convert SmolLM2's GGUF into the safetensors cache "
              "($DPAUDIT_CACHE, default ~/.cache/dpaudit).")
@click.option("--wordnet", is_flag=True, help="Also build NLTK's WordNet corpus in the cache (optional; METEOR needs "
              "it): from /usr/share/wordnet if installed, else Debian's wordnet-base and wordnet-sense-index "
              "fetched with `apt-get download`.")
@click.option("--wordnet-source", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="With --wordnet: a folder holding Debian's WordNet 3.0 files (data.noun, index.sense, ...).")
def assets(convert, wordnet, wordnet_source):
    """List the offline models and data dpaudit uses, where they are, and how to install what is missing."""
    from dpaudit.tasks.assets import cache_dir, check_all, install_wordnet, wordnet_dir

    statuses = check_all(convert=convert)
    for s in statuses:
        click.echo(f"{'ok     ' if s.ok else 'MISSING'} {s.name:16s} {s.detail}")
    if wordnet_source or (wordnet and wordnet_dir() is None):  # --wordnet keeps an installed corpus
        install_wordnet(wordnet_source)
    wn = wordnet_dir()
    click.echo(f"{'ok     ' if wn else 'optional'} {'wordnet':16s} "
               + (f"{wn} (METEOR on)" if wn else "not installed: METEOR is left out (`dpaudit assets --wordnet`)"))
    click.echo(f"cache: {cache_dir()}")
    if not all(s.ok for s in statuses):
        raise SystemExit(1)


@cli.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Output folder: one sub-folder per variant (checkpoint + report) and a comparison REPORT.md.")
@click.option("--variant", "variants", multiple=True, metavar="NAME",
              help="Run only this variant of CONFIG (repeatable); the data and canaries are those of the full "
                   "config, so rows from separate runs are comparable. Default: every variant.")
@click.option("--resume", is_flag=True,
              help="Continue an interrupted run in OUT: finished variants are kept, the interrupted one continues from "
                   "its latest snapshot with the same batches and noise (same card, same ledger). Refused when CONFIG, "
                   "the canaries or the data differ from the interrupted run's.")
@click.option("--snapshot-every", default=100, show_default=True, type=int, metavar="STEPS",
              help="Save the training state (weights, optimizer, random streams, privacy ledger) every STEPS logical "
                   "steps into OUT/<variant>/train_state (removed once the checkpoint is written); 0: never.")
@click.option("--redact", is_flag=True, help="Replace canary secrets by placeholders in the reports.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
def run(config_path, out, variants, resume, snapshot_every, redact, quiet):
    """Train every variant of CONFIG on the same data and canaries, audit each, and compare them."""
    from dpaudit import progress
    from dpaudit.pipeline import run as run_pipeline

    progress.set_quiet(quiet)
    reports = run_pipeline(config_path, out, _command_line(), redact=redact,
                           only=tuple(variants), resume=resume, snapshot_every=snapshot_every)
    from dpaudit.trainers import distributed

    if not distributed.is_main():
        return
    for name, r in reports.items():
        click.echo(f"{name}: {r['verdict']['status']}: {r['verdict']['reason']}")
    click.echo(f"report: {Path(out) / 'REPORT.md'}")


@cli.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Folder for REPORT.md, report.json, plots.")
@click.option("--attacks", default=None,
              help="Comma-separated attacks to run on the canaries (each scores every canary; higher = member). "
                   f"Default: the manifest's evaluation plan, else all ({','.join(options.ATTACKS)}).")
@click.option("--rule", type=click.Choice(options.RULES), default=None,
              help="How the one-run audit's choices stay valid: Bonferroni over attacks with the manifest's "
                   "guess counts, or attack and guesses chosen on a held-out half of the canaries. Default: the "
                   "plan's, else bonferroni.")
@click.option("--references", "n_references", default=None, type=int,
              help="Reference secrets sampled from the randomness space for exposure ranks. Default: the plan's, "
                   "else 2000.")
@click.option("--enumerate-limit", default=None, type=int,
              help="Rank exposure over the WHOLE randomness space (exactly, by a token trie; the suffix is then not "
                   "scored) when it has at most this many secrets. Default: whenever the trie fits its budget "
                   "(spaces up to 10^6 secrets with models up to ~200M parameters); 0: never (sampled references).")
@click.option("--reference-model", type=click.Path(path_type=Path),
              help="HF model folder for the reference attack (default: the checkpoint's base model).")
@click.option("--confidence", default=None, type=float,
              help="Confidence of the empirical lower bounds (family-wise over every test that can trigger a "
                   "verdict). Default: the plan's, else 0.95.")
@click.option("--off-plan", is_flag=True,
              help="Allow settings that depart from the evaluation plan fixed in canaries.json before training; "
                   "the report lists the departures, is marked exploratory, and `dpaudit check` fails it.")
@click.option("--base-metrics", is_flag=True,
              help="Also measure the task metrics of the model before fine-tuning (the checkpoint's base_model/ "
                   "or its run.json model spec): the zero-shot reference for the fine-tuning gain.")
@click.option("--canary-framing", "framing", type=click.Choice(("auto",) + options.FRAMINGS), default="auto",
              show_default=True,
              help="How a canary is tokenised for scoring, as the model saw its training records: bos_eos = BOS + "
                   "text + EOS (dpaudit's trainers), tokenizer = tokenizer(text) with the special tokens it adds "
                   "itself (a Hugging Face training loop); auto: bos_eos when the folder has dpaudit's run.json.")
@click.option("--whitebox-queries", default=64, show_default=True, type=click.IntRange(min=0),
              help="PMixED deployments only: how many canary queries (and as many logged user queries) get the exact "
                   "per-query check (about 4 s each for N = 8 on a 49k vocabulary on a CPU).")
@click.option("--device", "device_name", default="auto", show_default=True,
              help="Where the model runs: auto (CUDA when visible), cpu, cuda or cuda:N.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1),
              help="Texts per forward pass when scoring (exposure: 4x as many candidate secrets); lower it when a GPU "
                   "runs out of memory. Scores do not depend on it beyond float rounding.")
@click.option("--shard", default=None, metavar="I/N",
              help="Score only shard I of N (1 <= I <= N: every N-th batch of canaries, reference secrets and exposure "
                   "trie, shard 1 also the task metrics) and write the partial scores to --out instead of a report; "
                   "run the N shards anywhere (other processes, GPUs, machines) with the same options, then --merge.")
@click.option("--merge", "merge_parts", multiple=True, type=click.Path(path_type=Path), metavar="PARTIAL",
              help="Build the report from the partial folders of all N shards (repeat the option, or pass a glob): "
                   "the same report as one process. The evaluation options are the shards'; only --out, --redact "
                   "apply.")
@click.option("--redact", is_flag=True, help="Replace canary secrets by placeholders in the reports.")
@click.option("--quiet", is_flag=True, help="No progress bars.")
@click.pass_context
def evaluate(ctx, checkpoint, out, attacks, rule, n_references, enumerate_limit, reference_model, confidence, off_plan,
             base_metrics, framing, whitebox_queries, device_name, batch_size, shard, merge_parts, redact, quiet):
    """Audit CHECKPOINT: attacks, bounds, claim check, metrics. CHECKPOINT is a folder with privacy_card.json and
    canaries.json beside the model: dpaudit's model/ sub-folder, or a plain Hugging Face output folder (model
    files at its root, or a LoRA adapter whose base_model_name_or_path is a local folder). A PMixED deployment
    (a folder with pmixed.json) is audited through its outputs: the exact per-query check, black-box canary
    extraction within one budget, and perplexity through the protocol (the attack options do not apply)."""
    from dpaudit import device, progress
    from dpaudit.eval_options import EvalOptions

    progress.set_quiet(quiet)
    device.resolve(device_name, "--device")  # before any work
    out = check_out(out, [checkpoint, *merge_parts])
    opts = EvalOptions(attacks=attacks, rule=rule, confidence=confidence, n_references=n_references,
                       enumerate_limit=enumerate_limit, batch_size=batch_size, framing=framing,
                       reference=reference_model, base_metrics=base_metrics, off_plan=off_plan,
                       whitebox_queries=whitebox_queries, device=device_name)
    if shard is not None or merge_parts:
        _sharded(ctx, checkpoint, out, shard, merge_parts, redact, opts)
        return
    from dpaudit.evaluate import evaluate_folder

    _done(evaluate_folder(checkpoint, opts, _command_line(), out, redact), out)


def _done(r: dict, out: Path) -> None:
    click.echo(f"{r['verdict']['status']}: {r['verdict']['reason']}")
    click.echo(f"report: {Path(out) / 'REPORT.md'}")


# evaluate's options a --merge takes from the shards (each name as click knows it)
SHARD_OPTIONS = ("attacks", "rule", "n_references", "enumerate_limit", "reference_model", "confidence", "off_plan",
                 "base_metrics", "framing", "batch_size")


def _sharded(ctx, checkpoint, out, shard, merge_parts, redact, opts):
    """``evaluate --shard`` (write one shard's partial scores) or ``evaluate --merge`` (report from all of them)."""
    from dpaudit import report, shards
    from dpaudit.evaluate import merge, score_shard
    from dpaudit.pmixed.deployment import is_deployment

    if shard is not None and merge_parts:
        raise DpauditError("--shard and --merge are two steps: score each shard with --shard, then --merge them")
    if is_deployment(checkpoint):
        raise DpauditError("a PMixED deployment is audited through its outputs in one process; drop --shard/--merge")
    if merge_parts:
        given = [f"--{k.replace('_', '-')}" for k in SHARD_OPTIONS
                 if ctx.get_parameter_source(k) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise DpauditError(f"{given[0]} cannot be combined with --merge: the shards' options are used; pass it "
                               "to every --shard run instead")
        r = merge(checkpoint, merge_parts, command=_command_line())
        _done(r, report.write(r, out, redact=redact))
        return
    where = shards.parse(shard)
    loaded, scored = score_shard(checkpoint, where, opts)
    shards.write(out, loaded.ck, where, loaded.opts.shard_record(), scored.metrics, scored.canaries, scored.timings)
    click.echo(f"shard {shard}: partial scores in {out}; merge all {where[1]} with "
               f"dpaudit evaluate {checkpoint} --merge PARTIAL ... --out REPORT")


@cli.command()
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
        out = {n: accounting.calibrate_sigma(target_epsilon, delta, sample_rate, steps, n) for n in names}
        _per_accountant(out, as_json, f"σ reaching ε = {target_epsilon} at δ = {delta}, q = {sample_rate}, "
                                      f"T = {steps}:", "σ")
        return
    events = [accounting.SubsampledGaussian(sample_rate, sigma, steps)]
    _per_accountant({n: accounting.compute(events, delta, n).epsilon for n in names}, as_json, f"ε at δ = {delta}:",
                    "ε")


def _account_card(path: Path, as_json: bool) -> None:
    from dpaudit.card import load_card
    from dpaudit.reaccount import reaccount

    c = load_card(path)
    if not c.is_private:
        raise DpauditError(f"{path} claims no epsilon (non-private); nothing to account")
    acct = reaccount(c)
    if as_json:
        click.echo(json.dumps({"verdict": acct["status"], **acct}))
    else:
        click.echo(f"claim: ε = {c.claim.epsilon:g} at δ = {c.claim.delta:g} ({c.claim.unit} level, "
                   f"{c.claim.neighbouring} neighbours)")
        for r in acct["results"]:
            lo = "     ?    " if r.get("lower") is None else f"{r['lower']:10.4f}"
            click.echo(f"  {r['accountant']:20s} ε in [{lo}, {r['epsilon']:.4f}]  (δ = {r['delta']:.3g}) "
                       f"{r.get('detail', '')}")
        for name, why in acct["not_applicable"].items():
            click.echo(f"  {name:20s} not applicable: {why}")
        for f in acct["findings"]:
            click.echo(f"  finding: {f}")
        click.echo(f"{acct['status']}: {acct['reason']}")
    if acct["status"] != "verified":
        raise SystemExit(1)


def _per_accountant(values: dict, as_json: bool, title: str, symbol: str) -> None:
    if as_json:
        click.echo(json.dumps(values))
        return
    click.echo(title)
    for n, v in values.items():
        click.echo(f"  {n:8s} {symbol} = {v:.4f}")


@cli.group()
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


@cli.command("card")
@click.option("--epsilon", required=True, type=float, help="The claimed ε (what your accountant reported).")
@click.option("--delta", required=True, type=float, help="The claimed δ.")
@click.option("--sigma", required=True, type=float, help="Noise multiplier σ (noise std / clipping norm).")
@click.option("--sample-rate", required=True, type=float,
              help="Sampling rate q per step (Opacus: 1 / len(data_loader), not batch / dataset size).")
@click.option("--steps", required=True, type=int, help="Number of noisy steps T.")
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
@click.option("--out", required=True, type=click.Path(path_type=Path), help="privacy_card.json to write.")
def card_cmd(epsilon, delta, sigma, sample_rate, steps, sampler, neighbouring, unit, accountant, clipping_norm,
             batch_size, dataset_size, method, out):
    """Write privacy_card.json for a model trained with a stack that is not Opacus (one DP-SGD phase; for
    several phases use dpaudit.card_from_opacus or write the events list)."""
    from dpaudit import card as cardmod
    from dpaudit.accounting.events import SubsampledGaussian

    if not out.parent.is_dir():
        raise DpauditError(f"folder {out.parent} does not exist; create it first")
    c = cardmod.PrivacyCard(
        claim=cardmod.Claim(epsilon=epsilon, delta=delta, unit=unit, neighbouring=neighbouring, accountant=accountant),
        events=[SubsampledGaussian(sample_rate, sigma, steps, sampler)], clipping_norm=clipping_norm,
        expected_batch_size=batch_size, dataset_size=dataset_size, method=method)
    c = cardmod.card_from_dict(c.to_dict(), "the card")  # every check a reader applies, before anything is written
    write_atomic(out, c.save)
    click.echo(f"{out}: claim ε = {epsilon:g} at δ = {delta:g}; check it with `dpaudit account --card {out}`")


@cli.command()
@click.argument("report_json", type=click.Path(path_type=Path))
@click.option("--policy", type=click.Path(path_type=Path),
              help="Policy TOML with a [rules] table. Omitted: the default policy, exactly configs/policy.toml.")
def check(report_json, policy):
    """CI gate: exit 0 when REPORT_JSON satisfies every policy rule, 1 when one fails, 2 on bad input."""
    from dpaudit import policy as pol

    p = pol.load_policy(policy)
    r = pol.load_report(report_json)
    fails = pol.check_any(r, p)
    for f in fails:
        click.echo(f"FAIL {f}")
    if fails:
        raise SystemExit(1)
    click.echo(f"ok: {report_json} satisfies the policy")
    for line in pol.summaries(r):
        click.echo(f"  {line}")


@cli.command()
@click.argument("old_json", type=click.Path(path_type=Path))
@click.argument("new_json", type=click.Path(path_type=Path))
@click.option("--fail-on-regression", is_flag=True, help="Exit 1 when anything regressed.")
def compare(old_json, new_json, fail_on_regression):
    """Markdown diff of two report.json files (evaluation or comparison), flagging what regressed."""
    from dpaudit.compare import compare as diff
    from dpaudit.policy import load_report

    md, n = diff(load_report(old_json), load_report(new_json))
    click.echo(md, nl=False)
    if fail_on_regression and n:
        raise SystemExit(1)


@cli.group()
def audit():
    """Audit statistics from counts (no model needed)."""


@audit.command("one-run")
@click.option("--canaries", "m", required=True, type=int, help="Number of canaries m (each in with prob. 1/2).")
@click.option("--guesses", "r", required=True, type=int, help="Number of guesses r = k+ + k- (fixed in advance).")
@click.option("--correct", "v", required=True, type=int, help="Number of correct guesses v.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence level.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object with key epsilon_lb.")
def one_run_cmd(m, r, v, delta, confidence, as_json):
    """Steinke-Nasr-Jagielski one-run ε lower bound, with the ceiling r guesses allow, and the f-DP readings of
    the same counts (Mahloujifar, Melis, Chaudhuri 2024): the (ε, δ) trade-off bound and the Gaussian-DP estimate."""
    from dpaudit.audit import fdp, one_run

    _audit_params(delta, confidence, canaries=m, guesses=r, correct=v)
    if r > m:
        raise DpauditError(f"--guesses {r} cannot exceed --canaries {m}")
    try:
        lb = one_run.epsilon_lower_bound(m, r, v, delta, confidence)
        cap = one_run.ceiling(m, r, delta, confidence)
        f = fdp.audit(v, m, r // 2, r - r // 2, delta, confidence)
    except ValueError as e:
        raise DpauditError(str(e)) from None
    if as_json:
        click.echo(json.dumps({"epsilon_lb": lb, "ceiling": cap, "m": m, "r": r, "v": v, "delta": delta,
                               "confidence": confidence, "fdp_epsilon_lb": f.epsilon_lb, "fdp_ceiling": f.ceiling,
                               "gdp_mu_lb": f.gdp_mu_lb, "gdp_epsilon_estimate": f.gdp_epsilon_estimate}))
    else:
        click.echo(f"ε ≥ {lb:.3f} at {confidence:.0%} confidence (ceiling for {r} guesses: {cap:.3f})")
        est = (f", ε ≈ {f.gdp_epsilon_estimate:.3f} at δ = {delta:g} if the mechanism is Gaussian-shaped (an "
               "estimate)") if f.gdp_epsilon_estimate is not None else ""
        click.echo(f"f-DP: ε ≥ {f.epsilon_lb:.3f} (ceiling {f.ceiling:.3f}); Gaussian-DP μ ≥ {f.gdp_mu_lb:.3f}{est}")


@audit.command("many-run")
@click.option("--tp", required=True, type=int, help="Runs WITH the canary that the test called member.")
@click.option("--fn", required=True, type=int, help="Runs WITH the canary that the test called non-member.")
@click.option("--fp", required=True, type=int, help="Runs WITHOUT the canary that the test called member.")
@click.option("--tn", required=True, type=int, help="Runs WITHOUT the canary that the test called non-member.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Joint confidence of both rates.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def many_run_cmd(tp, fn, fp, tn, delta, confidence, as_json):
    """Clopper-Pearson ε lower bound from many training runs (Jagielski et al. 2020), plus the Gaussian-DP
    estimate (Nasr et al. 2023), which assumes a GDP-shaped mechanism and is labelled as an estimate.
    The test's threshold must have been fixed on other runs than these."""
    from dpaudit.audit import many_run

    _audit_params(delta, confidence, tp=tp, fn=fn, fp=fp, tn=tn)
    if tp + fn == 0 or fp + tn == 0:
        raise DpauditError("the many-run audit needs runs with the canary (--tp + --fn > 0) and runs without it "
                           "(--fp + --tn > 0)")
    try:
        lb = many_run.clopper_pearson_epsilon(tp, fn, fp, tn, delta, confidence)
        mu = many_run.gdp_mu_lower(tp, fn, fp, tn, confidence)
    except ValueError as e:
        raise DpauditError(str(e)) from None
    gdp_eps = many_run.gdp_epsilon(mu, delta) if delta > 0 else None
    if as_json:
        click.echo(json.dumps({"epsilon_lb": lb, "gdp_mu_lb": mu, "gdp_epsilon_estimate": gdp_eps,
                               "confidence": confidence, "delta": delta}))
    else:
        click.echo(f"ε ≥ {lb:.3f} at {confidence:.0%} confidence (Clopper-Pearson lower bound)")
        est = f", ε ≈ {gdp_eps:.3f} at δ = {delta}" if gdp_eps is not None else ""
        click.echo(f"estimate, assuming Gaussian DP: μ ≥ {mu:.3f}{est} (not a bound)")


@audit.command("checkpoints")
@click.argument("checkpoints", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--canary", "canary_id", required=True, help="Id of the target canary, in or out of each run.")
@click.option("--attack", default="loss", show_default=True, help="Black-box attack scoring the target.")
@click.option("--delta", default=0.0, show_default=True, type=float, help="δ of the hypothesis tested.")
@click.option("--confidence", default=0.95, show_default=True, type=float, help="Confidence of the bound.")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the tuning/audit split.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def checkpoints_cmd(checkpoints, canary_id, attack, delta, confidence, seed, as_json):
    """Many-run audit over CHECKPOINTS trained with and without one target canary: threshold chosen on
    half of them, Clopper-Pearson bound on the other half."""
    from dpaudit import checkpoint_audit

    _audit_params(delta, confidence)
    scores, member, _ = checkpoint_audit.score_checkpoints(list(checkpoints), canary_id, attack)
    r = checkpoint_audit.audit(scores, member, delta, confidence, seed)
    if as_json:
        click.echo(json.dumps(r))
    else:
        click.echo(f"ε ≥ {r['epsilon_lb']:.3f} at {confidence:.0%} confidence from {r['n_audit']} audit runs "
                   f"(TP {r['tp']}, FN {r['fn']}, FP {r['fp']}, TN {r['tn']}; threshold from {r['n_tuning']} other runs)")


def _audit_params(delta: float, confidence: float, **counts: int) -> None:
    """The hypothesis and confidence of an audit bound, and its counts, before any work: a bound at an invalid δ
    or at a confidence outside [0.5, 1) would be printed as if it were valid."""
    if not 0 <= delta < 1:  # NaN fails too
        raise DpauditError(f"--delta must be in [0, 1), got {delta}")
    checks.check_confidence(confidence, "--confidence")
    for name, n in counts.items():
        if n < 0:
            raise DpauditError(f"--{name} must be >= 0, got {n}")


from dpaudit.cli_lmo import lmo  # noqa: E402
from dpaudit.cli_pmixed import pmixed  # noqa: E402

cli.add_command(lmo)
cli.add_command(pmixed)


def main(argv=None) -> int:
    from dpaudit import offline

    offline.setup()
    try:
        cli.main(args=argv, standalone_mode=False)
    except DpauditError as e:
        click.echo(f"error: {e}", err=True)
        return 2
    except click.exceptions.Abort:
        return 130
    except click.exceptions.UsageError as e:  # one line, as every other bad input
        path = " ".join(["dpaudit", *(e.ctx.command_path.split()[1:] if e.ctx else [])])
        click.echo(f"error: {e.format_message()} (see `{path} --help`)", err=True)
        return 2
    except click.exceptions.ClickException as e:
        e.show()
        return 2
    except SystemExit as e:
        return int(e.code or 0)
    except Exception as e:  # noqa: BLE001 - a bug must not read as "a check failed" (1) nor print a wall of text
        import os

        if os.environ.get("DPAUDIT_DEBUG"):
            raise
        click.echo(f"error: internal error ({type(e).__name__}: {first_line(e)}); this is a dpaudit bug: please report it with "
                   "the command (DPAUDIT_DEBUG=1 prints the traceback)", err=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
