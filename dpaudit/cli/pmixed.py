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
@click.option("--max-new-tokens", required=True, type=click.IntRange(1, 100_000),
              help="Tokens to sample; each is one query of the budget T, reserved before any is answered.")
@click.option("--temperature", default=1.0, show_default=True, type=float,
              help="Only 1 is accepted: the guarantee covers sampling from the full mixture at temperature 1.")
@click.option("--top-k", type=int, default=None, help="Refused: top-k sampling voids the guarantee.")
@click.option("--top-p", type=float, default=None, help="Refused: top-p sampling voids the guarantee.")
@click.option("--seed", type=click.IntRange(0, 2 ** 63 - 1), default=None,
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


@pmixed.command()
@click.argument("deployment", type=click.Path(path_type=Path))
@click.option("--out", required=True, type=click.Path(path_type=Path),
              help="Folder for search.json (every number, every context's token ids) and SEARCH.md.")
@click.option("--per-partition", default=40, show_default=True, type=click.IntRange(0, 10_000),
              help="Training records drawn from each partition; every position of each is a candidate query.")
@click.option("--held-out", default=40, show_default=True, type=click.IntRange(0, 10_000),
              help="Held-out texts drawn from the task's test users (positions as above). Every canary is "
                   "always included.")
@click.option("--exact-top", default=64, show_default=True, type=click.IntRange(1, 100_000),
              help="Positions, ranked by the coarsened-vocabulary screen, whose exact divergences are computed.")
@click.option("--starts", default=4, show_default=True, type=click.IntRange(0, 1_000),
              help="Local searches (one-token edits), each from one of the worst exact contexts.")
@click.option("--rounds", default=12, show_default=True, type=click.IntRange(0, 1_000),
              help="Most rounds of each local search (it stops earlier when no edit improves).")
@click.option("--candidates", default=24, show_default=True, type=click.IntRange(1, 10_000),
              help="Edits screened per round; the best two by screen are checked exactly.")
@click.option("--baseline", default=48, show_default=True, type=click.IntRange(0, 100_000),
              help="Also check exactly the first N canary secret-token queries `dpaudit evaluate` checks (its "
                   "--whitebox-queries), reported apart: how much worse the search gets than the evaluation.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2 ** 63 - 1),
              help="Seeds the texts drawn and the random edits.")
@click.option("--device", default=None, help="torch device (default: cuda when present, else cpu).")
def search(deployment, out, per_partition, held_out, exact_top, starts, rounds, candidates, baseline, seed, device):
    """Search DEPLOYMENT for the queries (contexts) with the largest exact per-query divergence, and the
    realised subsets with the largest conditional divergence (the paper's proof's quantity), at the
    deployment's reading of Thm C.4 and at the other one. Every value written is exact; the search itself is a
    heuristic, so its worst is a lower value on the worst query, not a certificate. The ledger is not spent:
    this is the deployer's view (distributions), never an answer."""
    from dpaudit.claim.card import load_card
    from dpaudit.io import check_out
    from dpaudit.pmixed import search as S
    from dpaudit.pmixed.deployment import Deployment

    given, out = out, check_out(out, protected=(deployment,), outputs=S.OUTPUTS, owner="search.json")
    dep = Deployment.load(deployment, device=device)
    card = load_card(Path(deployment) / "privacy_card.json")
    texts = S.deployment_texts(dep, deployment, per_partition, held_out, seed)
    result = S.run(dep, texts, exact_top=exact_top, starts=starts, rounds=rounds, candidates=candidates, seed=seed,
                   delta=card.claim.delta, baseline=S.evaluation_queries(dep, deployment, baseline))
    result["command"] = "dpaudit pmixed search " + " ".join(
        [str(deployment), "--out", str(given), "--per-partition", str(per_partition), "--held-out", str(held_out),
         "--exact-top", str(exact_top), "--starts", str(starts), "--rounds", str(rounds), "--candidates",
         str(candidates), "--baseline", str(baseline), "--seed", str(seed)])
    S.write(result, out, deployment)
    click.echo(f"worst query found: {result['worst']['max_per_query']:.6g} against partition "
               f"{result['worst']['partition']} ({result['worst']['ratio_to_claim']:.3g}x the claimed "
               f"{result['claimed_per_query']:.6g}); {out / 'SEARCH.md'}")
