"""The ``dpaudit`` command line. Exit codes: 0 success, 1 a check failed, 2 bad input.

The top-level group and the evaluate, check, compare and run commands; the other command groups live in
the modules beside this one (account, audit, canaries, lmo, pmixed, reports). Every command is a thin click wrapper whose
options and help text are the user-facing contract; the work happens in the modules each command imports lazily,
so that light commands (check, compare, audit) never load torch. (Over 300 lines on purpose: most of it is the
options and help texts of evaluate, check and run, the contract users read in ``--help``.)
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from dpaudit import options
from dpaudit.cli.help import summary_option
from dpaudit.errors import DpauditError, first_line
from dpaudit.io import REPORT_FILES, check_out, printable

# the import names of pyproject.toml's [train] extra: what the lighter installs leave out
TRAIN_STACK = frozenset({"torch", "transformers", "peft", "opacus", "datasets", "sklearn", "safetensors", "matplotlib",
                         "gguf", "tokenizers", "huggingface_hub", "sacrebleu", "rouge_score", "nltk"})
# the import names of the [audit] extra: what the gate's install leaves out
AUDIT_STACK = frozenset({"scipy", "dp_accounting"})
# what each lighter install runs (README, Install; tests/cli/test_light_install.py): named once for both messages
GATE_COMMANDS, AUDIT_COMMANDS = "check, compare, table, model-card", "account, audit"


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
@click.option("--out", default=None, type=click.Path(path_type=Path),
              help="Output folder (required, except with --dry-run): one sub-folder per variant (checkpoint + "
                   "report) and a comparison REPORT.md.")
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
@click.option("--dry-run", is_flag=True, help="Validate CONFIG and print each variant's plan without training: q, "
              "the divisor B, steps, δ, the noise calibrated to the target and the ε the card will claim, parameters "
              "and a memory estimate per device for the clipping mode (the model is built from its config on the "
              "meta device: no weights are read). Writes nothing; --out is not needed.")
@click.option("--train-only", is_flag=True,
              help="Train and write each variant's checkpoint, then stop: no audit, no comparison. Audit later with "
                   "`dpaudit evaluate OUT/VARIANT/checkpoint --out OUT/VARIANT/report` (elsewhere too: on another "
                   "machine, or sharded).")
def run(config_path, out, variants, resume, snapshot_every, redact, quiet, dry_run, train_only):
    """Train every variant of CONFIG on the same data and canaries, audit each, and compare them."""
    from dpaudit import progress
    from dpaudit.run.pipeline import run as run_pipeline

    progress.set_quiet(quiet)
    if dry_run:
        from dpaudit.run import dry_run as dry

        plans, notes = dry.plan(config_path, tuple(variants))
        click.echo(dry.render(plans, notes), nl=False)
        return
    if out is None:
        raise DpauditError("dpaudit run needs --out FOLDER (or --dry-run to only print the plan)")

    progress.set_quiet(quiet)
    reports = run_pipeline(config_path, out, _command_line(), redact=redact,
                           only=tuple(variants), resume=resume, snapshot_every=snapshot_every, train_only=train_only)
    from dpaudit.trainers import distributed

    if not distributed.is_main():
        return
    if train_only:
        for name, folder in reports.items():
            click.echo(printable(f"{name}: trained: {folder} (audit it with `dpaudit evaluate {folder} --out "
                                 f"{Path(folder).parent / 'report'}`)"))
        return
    from dpaudit.report.markdown import strength_lines

    for name, r in reports.items():
        click.echo(printable(f"{name}: {r['verdict']['status']}: {r['verdict']['reason']}"))
        for line in strength_lines(r):  # as `evaluate` prints it: what the test could show at the claim
            click.echo(printable(f"  {line[2:]}"))
    click.echo(f"report: {Path(out) / 'REPORT.md'}")


@cli.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Folder for REPORT.md, report.json, plots (created; other files there are kept; a folder holding "
                   "one of those names but no report of dpaudit's is refused).")
@click.option("--attacks", default=None,
              help="Comma-separated attacks to run on the canaries (each scores every canary; higher = member). "
                   f"Default: the manifest's evaluation plan, else the outputs-only ones ({','.join(options.OUTPUT_ATTACKS)}); "
                   f"final_weights and final_weights_norm read new-token canaries' own rows.")
@click.option("--rule", type=click.Choice(options.RULES), default=None,
              help="How the one-run audit's choices stay valid: Bonferroni over attacks with the manifest's "
                   "guess counts, or attack and guesses chosen on a held-out half of the canaries. Default: the "
                   "plan's, else bonferroni.")
@click.option("--references", "n_references", default=None, type=int,
              help="Reference secrets sampled from the randomness space for exposure ranks. Default: the plan's, "
                   "else 2000.")
@click.option("--enumerate-limit", default=None, type=int,
              help="Opt in to ranking exposure over the WHOLE randomness space (exactly, by a token trie; the suffix "
                   "is then not scored) when it has at most this many secrets, e.g. 1000000. Default (or 0): ranks "
                   "among --references sampled secrets; the exact pass costs a forward pass per trie node (minutes on "
                   "a CPU) and its exposure numbers never enter the verdict.")
@click.option("--reference-model", type=click.Path(path_type=Path),
              help="HF model folder for the reference attack (default: the checkpoint's base model): the base the "
                   "checkpoint was fine-tuned from, reading the canaries as its tokenizer does (another tokenizer "
                   "or a shorter context is refused).")
@click.option("--base-model", type=click.Path(path_type=Path), default=None,
              help="The base model folder of a LoRA adapter checkpoint that does not ship it under base_model/ "
                   "(the adapter's base_model_name_or_path is never followed outside the checkpoint on its own): "
                   "the report records it and its hash covers the base's bytes.")
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
def evaluate(ctx, checkpoint, out, attacks, rule, n_references, enumerate_limit, reference_model, base_model,
             confidence, off_plan, base_metrics, framing, whitebox_queries, device_name, batch_size, shard,
             merge_parts, redact, quiet):
    """Audit CHECKPOINT: attacks, bounds, claim check, metrics. CHECKPOINT is a folder with privacy_card.json and
    canaries.json beside the model: dpaudit's model/ sub-folder, or a plain Hugging Face output folder (model
    files at its root, or a LoRA adapter with its base in base_model/ or given by --base-model). A PMixED deployment
    (a folder with pmixed.json) is audited through its outputs: the exact per-query check, black-box canary
    extraction within one budget, and perplexity through the protocol (the attack options do not apply).
    Exit 0 once the report is written, whatever its verdict (the verdict is the printed line; `dpaudit check`
    gates it: exit 1 on `violated`, `mechanism-mismatch` or `accounting-mismatch` under the default policy), 2 on
    bad input."""
    from dpaudit import device, progress
    from dpaudit.evaluation.options import EvalOptions

    progress.set_quiet(quiet)
    device.resolve(device_name, "--device")  # before any work
    out = check_out(out, [checkpoint, *merge_parts, *([base_model] if base_model else [])], outputs=REPORT_FILES)
    opts = EvalOptions(attacks=attacks, rule=rule, confidence=confidence, n_references=n_references,
                       enumerate_limit=enumerate_limit, batch_size=batch_size, framing=framing,
                       reference=reference_model, base_metrics=base_metrics, off_plan=off_plan,
                       whitebox_queries=whitebox_queries, device=device_name, base_model=base_model)
    if shard is not None or merge_parts:
        _sharded(ctx, checkpoint, out, shard, merge_parts, redact, opts)
        return
    from dpaudit.run.outputs import evaluate_folder

    _done(evaluate_folder(checkpoint, opts, _command_line(), out, redact), out)


def _done(r: dict, out: Path) -> None:
    from dpaudit.report.markdown import strength_lines

    click.echo(printable(f"{r['verdict']['status']}: {r['verdict']['reason']}"))
    for line in strength_lines(r):  # what a mechanism exactly at the claim shows with these canaries
        click.echo(printable(line[2:]))
    click.echo(f"report: {Path(out) / 'REPORT.md'}")


def _sharded(ctx, checkpoint, out, shard, merge_parts, redact, opts):
    """``evaluate --shard`` (write one shard's partial scores) or ``evaluate --merge`` (report from all of them)."""
    from dpaudit.evaluation import shards
    from dpaudit.evaluation.steps import merge, score_shard
    from dpaudit.pmixed.deployment import is_deployment
    from dpaudit.report import write as report

    if shard is not None and merge_parts:
        raise DpauditError("--shard and --merge are two steps: score each shard with --shard, then --merge them")
    if is_deployment(checkpoint):
        raise DpauditError("a PMixED deployment is audited through its outputs in one process; drop --shard/--merge")
    if merge_parts:
        from dpaudit.evaluation.options import SHARD_KEYS

        names = {"reference" if p.name == "reference_model" else p.name: p for p in ctx.command.params}
        given = [names[k].opts[0] for k in SHARD_KEYS  # the options a merge takes from the shards
                 if ctx.get_parameter_source(names[k].name) == click.core.ParameterSource.COMMANDLINE]
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
@click.argument("report_json", type=click.Path(path_type=Path))
@click.option("--policy", type=click.Path(path_type=Path),
              help="Policy TOML with a [rules] table. Omitted: the default policy, exactly configs/policy.toml.")
@click.option("--checkpoint", "ckpt", type=click.Path(path_type=Path), default=None,
              help="Re-derive the report's checkpoint hash, claim, mechanism, accounting check, evaluation plan, and "
                   "its whole evidence (test rows, limits, the probe's mechanism and noise checks, attack metrics, "
                   "tiers) and verdict from this checkpoint folder and the report's attack scores instead of trusting "
                   "the JSON; any difference fails the gate. The attack scores themselves are taken from the report, "
                   "not recomputed (docs/security.md).")
@click.option("--rescore", is_flag=True,
              help="With --checkpoint: also recompute the attack scores from the model (loss, zlib, min_k, "
                   "min_k_plus, final_weights, exposure; reference when the checkpoint's own base calibrated it), each "
                   "equal to the report's to float rounding, and measure the task metrics again (min_accuracy reads "
                   "them); needs the training install (torch). A reference "
                   "attack calibrated by another model is still taken from the report. A post-hoc audit's report "
                   "(audit identifiers, audit split) is rescored from the files it names, read again.")
@summary_option("the result (passed or failed, each FAIL, the headline, what was checked)")
def check(report_json, policy, ckpt, rescore, summary_md):
    """CI gate: exit 0 when REPORT_JSON satisfies every policy rule, 1 when one fails, 2 on bad input."""
    from dpaudit.gate import job_summary
    from dpaudit.gate import policy as pol

    if rescore and ckpt is None:
        raise DpauditError("--rescore recomputes the scores from the model: pass its folder with --checkpoint CKPT")
    if rescore and not _has("torch"):
        raise DpauditError(f"--rescore runs the model, which needs the training install: {_pip('train')}")
    p = pol.load_policy(policy)
    r = pol.load_report(report_json)
    fails = pol.check_any(r, p)
    taken = ["the attack scores"] + (["the exposure log-perplexities"] if r.get("exposure") else []) \
        + (["the task metrics"] if r.get("metrics") else [])
    scores_from = ", ".join(taken[:-1]) + (" and " if len(taken) > 1 else "") + taken[-1] + " taken from the report"
    if isinstance(r.get("posthoc"), dict):  # its units were never written: their membership is the report's
        identifiers = r["posthoc"].get("kind") == "natural identifiers"
        scores_from = ("the attack scores taken from the report, each pair's coin drawn again from its seed"
                       if identifiers else "the attack scores and each record's membership taken from the report")
        scores_from += ", the files it names and the records it left out as it says (--rescore reads them again)"
    if ckpt is not None:
        from dpaudit.gate import rederive

        fails = [f"re-derived from {ckpt}: {m}" for m in rederive.mismatches(r, ckpt)] + fails
    if rescore:
        from dpaudit.evaluation import rescore as rescoring

        wrong, redone, kept = rescoring.mismatches(r, ckpt)
        fails = [f"rescored from {ckpt}: {m}" for m in wrong] + fails
        attacks = [a for a in redone if a != "task metrics"]
        scores_from = (f"the scores of {', '.join(attacks) or 'no attack'}"
                       + (" and the task metrics" if "task metrics" in redone else "") + " recomputed from the model"
                       + (" and the files the report names" if isinstance(r.get("posthoc"), dict) else "")
                       + (f" ({', '.join(kept)} taken from the report)" if kept else ""))
    if ckpt is not None:
        checked = f"hash, claim, accounting, plan, evidence and verdict re-derived from {ckpt}; {scores_from}"
    else:
        need = "" if _has("scipy") else f" (which re-accounts the claim: add the audit install, {_pip('audit')})"
        checked = ("the report's own numbers against the policy, not that it came from a model (a consistently "
                   f"edited report passes); bind it with --checkpoint CHECKPOINT{need}")
    if summary_md is not None:
        job_summary.append(summary_md, job_summary.gate_markdown(report_json, fails, pol.summaries(r),
                                                                 "checked: " + checked))
    for f in fails:  # strings from the report are escaped: a report cannot print lines of its own
        click.echo(f"FAIL {printable(f)}")
    if fails:
        raise SystemExit(1)
    click.echo(f"ok: {printable(report_json)} satisfies the policy"
               + (f"; its hash, claim, accounting, plan, evidence and verdict re-derived from {printable(ckpt)} "
                  f"agree ({printable(scores_from)})" if ckpt else ""))
    for line in pol.summaries(r):
        click.echo(f"  {printable(line)}")
    if ckpt is None:
        click.echo(f"  checked: {printable(checked)}")


def _has(module: str) -> bool:
    """Whether ``module`` can be imported here (an install without it: False, never an exception)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _pip(extra: str) -> str:
    from dpaudit.install_hint import pip_command

    return pip_command(extra)


from dpaudit.cli.account import account, card_cmd  # noqa: E402
from dpaudit.cli.audit import audit  # noqa: E402
from dpaudit.cli.canaries import canaries  # noqa: E402
from dpaudit.cli.help import add_epilogs  # noqa: E402
from dpaudit.cli.lmo import lmo  # noqa: E402
from dpaudit.cli.pmixed import pmixed  # noqa: E402
from dpaudit.cli.posthoc import identifiers_cmd, split_cmd  # noqa: E402
from dpaudit.cli.reports import compare, model_card_cmd, table_cmd  # noqa: E402

for command in (account, card_cmd, canaries, audit, lmo, pmixed, compare, table_cmd, model_card_cmd):
    cli.add_command(command)
for command in (identifiers_cmd, split_cmd):  # post-hoc audits of checkpoints without planted canaries
    audit.add_command(command)
add_epilogs(cli)  # every command's --help ends with an example and its exit codes (dpaudit/cli/help.py)


def _uncreatable(name) -> bool:
    """Whether an ENOENT or EINVAL on ``name`` was the creation of a new file or folder in an existing folder that
    takes none (/proc, a pseudo file system): its folder is there, it is not. A file read is checked before it is
    opened, so a missing input never reaches here."""
    if not isinstance(name, (str, Path)) or not str(name):
        return False
    p = Path(name)
    return p.parent.is_dir() and not p.exists() and not p.is_symlink()


def _not_utf8(argv) -> str | None:
    """The first argument Python decoded from bytes that are not UTF-8 (``surrogateescape``: lone surrogates), which
    no report, JSON or tokenizer can hold (a UnicodeEncodeError, exit 3, where the first one was written)."""
    for a in argv:
        if isinstance(a, str):
            try:
                a.encode("utf-8")
            except UnicodeEncodeError:
                return a
    return None


def main(argv=None) -> int:
    from dpaudit import offline

    offline.setup()
    if sys.stdout is None:  # started with fd 1 closed (`dpaudit ... >&-`): every result line would vanish silently
        click.echo("error: standard output is closed; dpaudit prints its results there: run it with stdout open "
                   "(redirect to a file or /dev/null to discard them)", err=True)
        return 2
    undecodable = _not_utf8(sys.argv[1:] if argv is None else argv)
    if undecodable is not None:
        click.echo(f"error: the argument {printable(undecodable)} holds bytes that are not UTF-8 (a file or folder "
                   "name in another encoding); dpaudit writes names into UTF-8 reports: rename it, or pass another "
                   "path", err=True)
        return 2
    try:
        cli.main(args=argv, standalone_mode=False)
    except DpauditError as e:
        click.echo(f"error: {printable(e)}", err=True)  # a name read from a file cannot break the one line
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
        if _stdout_broke():
            return 2
        return int(e.code or 0)
    except RuntimeError as e:
        if str(e).startswith("Symlink loop"):  # pathlib's resolve() before Python 3.13 (OSError ELOOP after)
            click.echo(f"error: {printable(e)}: links that point at each other; remove them or pass the real path",
                       err=True)
            return 2
        return _internal(e)
    except UnicodeEncodeError as e:
        if isinstance(e.object, str) and any("\udc80" <= ch <= "\udcff" for ch in e.object[e.start:e.end]):
            # a file name on disk in another encoding than UTF-8, read and then written into a UTF-8 report
            click.echo(f"error: a file or folder name among the inputs is not UTF-8 ({printable(e.object[:200])}); "
                       "dpaudit writes names into UTF-8 reports: rename it (nothing partial was kept)", err=True)
            return 2
        return _internal(e)
    except OSError as e:  # the machine, not dpaudit: a full disk, a closed stdout, a file system limit
        import errno

        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EPIPE, errno.ENAMETOOLONG, errno.EROFS, errno.EIO,
                       errno.EACCES, errno.EPERM, errno.ELOOP) or (
                e.errno in (errno.ENOENT, errno.EINVAL) and _uncreatable(e.filename)):
            # EACCES: a mount or ACL refusing what the mode bits allow; ENOENT or EINVAL creating one of dpaudit's
            # own temporary files: a folder that takes no new file (/proc, a pseudo file system)
            fix = ("pass a folder you can write" if e.errno in (errno.EROFS, errno.ENOENT, errno.EINVAL) else
                   "links that point at each other: remove them or pass the real path" if e.errno == errno.ELOOP else
                   "this user may not read or write it: fix its permissions (weights another user saved with "
                   "safetensors are 0600: `chmod a+r` them) or pass a folder you can write"
                   if e.errno in (errno.EACCES, errno.EPERM) else "free space, fix the output or pass another path")
            what = f"{e.strerror or e}{f' ({printable(e.filename)})' if e.filename else ''}"
            if ".partial-" in str(e.filename or ""):  # one of dpaudit's temporary files: the folder is what failed
                what = f"cannot create a file in {printable(Path(str(e.filename)).parent)} ({e.strerror or e})"
                fix = fix if e.errno in (errno.ENOSPC, errno.EDQUOT) else "pass a folder you can write"
            elif e.errno in (errno.ENOENT, errno.EINVAL):  # a new path that could not be made, or a file that vanished
                what = f"cannot create or find {printable(e.filename)} ({e.strerror or e})"
                fix = ("pass a folder you can write (a pseudo file system such as /proc takes no new file), or restore "
                       "the file if something removed it while dpaudit ran")
            try:
                click.echo(f"error: {what}; {fix} (nothing partial was kept: outputs are written whole or not at "
                           "all)", err=True)
            except OSError:
                pass
            return 2
        return _internal(e)
    except ModuleNotFoundError as e:  # a lighter install (pyproject.toml's extras) running a command of a fuller one
        missing = (e.name or "").split(".")[0]
        if missing in AUDIT_STACK:
            click.echo(f"error: this command needs {missing}, which the gate's install ({GATE_COMMANDS}) leaves out: "
                       f"{_pip('audit')} (adds {AUDIT_COMMANDS}), or [train] for everything", err=True)
            return 2
        if missing not in TRAIN_STACK:
            return _internal(e)
        click.echo(f"error: this command needs {missing}, which the lighter installs (the gate: {GATE_COMMANDS}; "
                   f"[audit]: + {AUDIT_COMMANDS}) leave out: {_pip('train')}", err=True)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug must not read as "a check failed" (1) nor print a wall of text
        return _internal(e)
    except BaseException as e:  # a Rust panic in tokenizers/safetensors (pyo3's PanicException) on a hostile file
        if type(e).__name__ != "PanicException":
            raise
        click.echo(f"error: a tokenizer or weights file made its parser panic ({printable(first_line(e))}); the file "
                   "is damaged or hostile: restore it from its source", err=True)
        return 2
    return 0


def _stdout_broke() -> bool:
    """Click answers a broken pipe on stdout (the reader, e.g. `| head`, went away) with exit 1 and swaps in a
    flush-pacifying wrapper; 1 reads as "a check failed", so say what happened and let main exit 2."""
    if not type(sys.stdout).__name__.endswith("PacifyFlushWrapper"):  # click.utils (_)PacifyFlushWrapper, by name
        return False
    try:
        click.echo("error: standard output was closed before dpaudit finished writing (broken pipe); the reader "
                   "left early: read the whole output, or redirect it to a file", err=True)
    except OSError:
        pass
    return True


def _internal(e: Exception) -> int:
    """A dpaudit bug: one line, exit 3 (the traceback with DPAUDIT_DEBUG=1)."""
    import os

    if os.environ.get("DPAUDIT_DEBUG"):
        raise e
    click.echo(f"error: internal error ({type(e).__name__}: {first_line(e)}); this is a dpaudit bug: please report it with "
               "the command (DPAUDIT_DEBUG=1 prints the traceback)", err=True)
    return 3


if __name__ == "__main__":
    sys.exit(main())
