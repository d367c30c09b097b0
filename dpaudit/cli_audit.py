"""``dpaudit audit``: audit bounds from counts (one-run, many-run) and many-run audits over checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import click

from dpaudit import checks
from dpaudit.errors import DpauditError


@click.group()
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
