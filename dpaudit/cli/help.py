"""What every command's ``--help`` ends with: one example to copy and the exit codes a CI job can use (issue wave 5
· 4/5, item 7). :func:`add_epilogs` gives them to every command of the group once all are registered;
tests/cli/test_help.py holds every command to having both."""

from __future__ import annotations

import click

EXAMPLES = {
    "assets": "dpaudit assets",
    "run": "dpaudit run configs/demo.toml --out runs/demo --variant dp-eps8",
    "evaluate": "dpaudit evaluate my-model --out my-model-report",
    "check": "dpaudit check my-model-report/report.json --policy configs/policy.toml --checkpoint my-model",
    "account": "dpaudit account --card my-model/privacy_card.json",
    "card": "dpaudit card --epsilon 8 --delta 1e-5 --sigma 0.7 --sample-rate 0.01 --steps 3000 --intended-epsilon 8 "
            "--out my-model/privacy_card.json",
    "canaries new": "dpaudit canaries new --m 1000 --out canaries.json --records canary_records.jsonl",
    "audit one-run": "dpaudit audit one-run --canaries 1000 --guesses 500 --correct 500 --delta 1e-5",
    "audit scores": "dpaudit audit scores scores.csv --strategy search --delta 1e-5",
    "audit plan": "dpaudit audit plan --sample-rate 0.01 --sigma 0.6 --steps 3000 --canaries 1000,10000",
    "audit strategy": "dpaudit audit strategy --mechanism auc:0.6 --canaries 1000 --sims 20",
    "audit many-run": "dpaudit audit many-run --tp 40 --fn 10 --fp 5 --tn 45 --delta 1e-5",
    "audit checkpoints": "dpaudit audit checkpoints runs/in-1 runs/out-1 runs/in-2 runs/out-2 --canary c000",
    "audit identifiers": "dpaudit audit identifiers my-model --training-data train.jsonl --format uuid4 --out ids-report",
    "audit split": "dpaudit audit split my-model --members members.jsonl --non-members held_out.jsonl --fair-coin "
                   "--out split-report",
    "lmo search": "dpaudit lmo search --epsilon 3 --delta 1e-5 --steps 1000 --sample-rate 0.01",
    "lmo account": "dpaudit lmo account --noise '{\"a1\": 0.3, \"a2\": 0.2, \"a3\": 0.5, \"gamma_k\": 2, "
                   "\"gamma_theta\": 0.5, \"exp_rate\": 5, \"u_low\": 0.5, \"u_high\": 1.5}' --delta 1e-5 "
                   "--steps 1000 --sample-rate 0.01",
    "pmixed generate": "dpaudit pmixed generate my-deployment --prompt 'The weather' --max-new-tokens 20",
    "pmixed budget": "dpaudit pmixed budget my-deployment",
    "pmixed search": "dpaudit pmixed search my-deployment --out worst-case",
    "compare": "dpaudit compare old/report.json new/report.json --fail-on-regression",
    "table": "dpaudit table runs/demo --columns variant,accuracy_ci,verdict",
    "model-card": "dpaudit model-card my-model-report/report.json --to my-model/README.md",
}

# what exit 1 means, for the commands that use it; every other command exits 0 on success
ONE = {
    "assets": "an asset is missing",
    "check": "a policy rule fails (one FAIL line each)",
    "account": "with --card: the claim is not verified (under-claim or unverifiable)",
    "compare": "with --fail-on-regression: a regression with a test behind it",
}


def summary_option(what: str):
    """``--summary FILE``, one option for every command that writes a CI job's summary page: append ``what`` to FILE
    as markdown (GitHub Actions: ``--summary "$GITHUB_STEP_SUMMARY"``)."""
    from pathlib import Path

    def before_any_work(ctx, param, value):
        from dpaudit.io import check_append_target

        return None if value is None else check_append_target(value, "job summary")

    return click.option("--summary", "summary_md", type=click.Path(path_type=Path), default=None, metavar="FILE",
                        callback=before_any_work,
                        help=f"Also append {what} as markdown to FILE: in GitHub Actions, --summary "
                             "\"$GITHUB_STEP_SUMMARY\" puts it on the job's page.")


def epilog(path: str) -> str:
    codes = "Exit codes: 0 success" + (f"; 1 {ONE[path]}" if path in ONE else "") + \
        "; 2 bad input (one line naming the problem and the fix, nothing written); 3 internal error (a dpaudit " \
        "bug: DPAUDIT_DEBUG=1 prints the traceback)."
    return f"\b\nExample:\n  {EXAMPLES[path]}\n\n{codes}"


def add_epilogs(group: click.Group, prefix: str = "") -> None:
    """Every leaf command of ``group`` gets its example and exit codes (a command without an example fails
    tests/cli/test_help.py, not the CLI)."""
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            add_epilogs(cmd, path + " ")
        elif path in EXAMPLES:
            cmd.epilog = epilog(path)
