"""``dpaudit pmixed``: answer queries from a PMixED deployment (within its budget, only as its guarantee
covers) and show what is left of the budget. ``dpaudit evaluate DEPLOYMENT`` audits one."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def pmixed():
    """PMixED deployments: private prediction from an ensemble, with a persisted query budget."""


@pmixed.command()
@click.argument("deployment", type=click.Path(path_type=Path))
@click.option("--prompt", required=True, help="The text to continue.")
@click.option("--max-new-tokens", required=True, type=int,
              help="Tokens to sample; each is one query of the budget T, reserved before any is answered.")
@click.option("--temperature", default=1.0, show_default=True, type=float,
              help="Only 1 is accepted: the guarantee covers sampling from the full mixture at temperature 1.")
@click.option("--top-k", type=int, default=None, help="Refused: top-k sampling voids the guarantee.")
@click.option("--top-p", type=float, default=None, help="Refused: top-p sampling voids the guarantee.")
@click.option("--seed", type=int, default=None,
              help="Seed the sampling (reproducible tests only). Default: fresh OS randomness, never stored.")
@click.option("--device", default=None, help="torch device (default: cuda when present, else cpu).")
def generate(deployment, prompt, max_new_tokens, temperature, top_k, top_p, seed, device):
    """Continue PROMPT with DEPLOYMENT's private prediction (Alg. 1 per token). Exit 2, answering nothing, when
    the budget cannot cover --max-new-tokens or a decoding option voids the guarantee."""
    from dpaudit.pmixed.deployment import Deployment, check_decoding

    check_decoding(temperature, top_k, top_p)  # before loading anything
    dep = Deployment.load(deployment, device=device)
    click.echo(dep.generate(prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed))


@pmixed.command()
@click.argument("deployment", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def budget(deployment, as_json):
    """Queries spent and left of DEPLOYMENT's budget T."""
    from dpaudit.errors import DpauditError
    from dpaudit.pmixed.deployment import is_deployment
    from dpaudit.pmixed.ledger import Ledger

    if not is_deployment(deployment):
        raise DpauditError(f"{deployment} is not a PMixED deployment (pmixed.json missing)")
    s = Ledger.of_deployment(deployment).state()
    s["left"] = max(0, s["queries"] - s["spent"])
    click.echo(json.dumps(s) if as_json else f"{s['spent']} of T = {s['queries']} queries spent, {s['left']} left")
