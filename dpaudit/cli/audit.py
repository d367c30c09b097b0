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
    if m > MAX_CANARIES or r > MAX_GUESSES:
        raise DpauditError(f"at most {MAX_CANARIES:.0e} canaries and {MAX_GUESSES:.0e} guesses (the f-DP reading takes "
                           f"about a minute at 10^6 guesses); got {m:,} and {r:,}")
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


@audit.command("plan")
@click.option("--sample-rate", "q", required=True, type=float, help="The card's Poisson sampling rate q.")
@click.option("--sigma", required=True, type=float, help="The card's noise multiplier σ.")
@click.option("--steps", required=True, type=int, help="The card's noisy steps T.")
@click.option("--delta", default=1e-5, show_default=True, type=float, help="δ of the claim the audit tests.")
@click.option("--confidence", default=0.95, show_default=True, type=float,
              help="Confidence of the white-box test (the report's family-wise share of it, e.g. 1 - 0.05/7).")
@click.option("--canaries", "ms", default="1000,5000,20000,100000", show_default=True, metavar="M,...",
              help="Numbers of white-box Dirac canaries to compare.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per m.")
def plan_cmd(q, sigma, steps, delta, confidence, ms, as_json):
    """Before training: what a white-box audit with m canaries can show about this mechanism (the median simulated
    one-run bound at the best guess count, docs/probe.md), for each m. Pick m here, then fix it in the config
    (train.gradient_canaries) or attach_probe(m=...): the audit is planned before its scores exist."""
    from dpaudit.audit import mechanism_limit

    _audit_params(delta, confidence)
    if not (0 < q <= 1 and sigma > 0 and steps >= 1):
        raise DpauditError(f"need 0 < --sample-rate <= 1, --sigma > 0 and --steps >= 1; got {q}, {sigma}, {steps}")
    try:
        sizes = [int(x) for x in ms.split(",") if x.strip()]
    except ValueError:
        raise DpauditError(f"--canaries takes integers separated by commas, got {ms!r}") from None
    if not sizes or min(sizes) < 2:
        raise DpauditError(f"--canaries takes integers >= 2, got {ms!r}")
    if max(sizes) > MAX_PLAN_CANARIES or len(sizes) > MAX_PLAN_SIZES:
        raise DpauditError(f"--canaries takes at most {MAX_PLAN_SIZES} sizes of at most {MAX_PLAN_CANARIES:,} canaries "
                           f"each (each size is simulated: about 20 s at 10^6); got {len(sizes)} sizes up to "
                           f"{max(sizes):,}")
    rows = []
    for m in sizes:
        st = mechanism_limit.study(m, q, sigma, steps, delta, confidence)
        if st is None:
            rows.append({"m": m, "epsilon_lb": None, "best_k": None, "method": None})
            continue
        j = st["k"].index(st["best_k"])
        rows.append({"m": m, "epsilon_lb": st["epsilon_lb"][j], "best_k": st["best_k"], "method": st["method"],
                     "median_right": st["median_right"][j]})
    if as_json:
        click.echo(json.dumps(rows))
        return
    click.echo(f"white-box Dirac canaries on a subsampled Gaussian (q = {q:g}, σ = {sigma:g}, T = {steps}), "
               f"δ = {delta:g}, {confidence:.1%}:")
    for r in rows:
        if r["epsilon_lb"] is None:
            click.echo(f"  m = {r['m']:>9,}: beyond the simulation budget (no limit; the audit keeps m/4 + m/4)")
        else:
            click.echo(f"  m = {r['m']:>9,}: ε ≥ {r['epsilon_lb']:.2f} in the median audit ({r['best_k']:,} + "
                       f"{r['best_k']:,} guesses, {r['median_right']:,} right; {r['method']})")


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
    from dpaudit.evaluation import checkpoint_audit

    _audit_params(delta, confidence)
    scores, member, _ = checkpoint_audit.score_checkpoints(list(checkpoints), canary_id, attack)
    r = checkpoint_audit.audit(scores, member, delta, confidence, seed)
    if as_json:
        click.echo(json.dumps(r))
    else:
        click.echo(f"ε ≥ {r['epsilon_lb']:.3f} at {confidence:.0%} confidence from {r['n_audit']} audit runs "
                   f"(TP {r['tp']}, FN {r['fn']}, FP {r['fp']}, TN {r['tn']}; threshold from {r['n_tuning']} other runs)")


MAX_CANARIES = 10 ** 8  # audit one-run: the Steinke bound's cost does not grow with m beyond this
MAX_GUESSES = 10 ** 6  # audit one-run: the f-DP reading is O(r) per evaluation (about a minute at 10^6 here)
MAX_PLAN_CANARIES = 10 ** 6  # audit plan: a simulated audit per size (about 20 s at 10^6 on this project's CPU)
MAX_PLAN_SIZES = 20


def _audit_params(delta: float, confidence: float, **counts: int) -> None:
    """The hypothesis and confidence of an audit bound, and its counts, before any work: a bound at an invalid δ
    or at a confidence outside [0.5, 1) would be printed as if it were valid."""
    if not 0 <= delta < 1:  # NaN fails too
        raise DpauditError(f"--delta must be in [0, 1), got {delta}")
    checks.check_confidence(confidence, "--confidence")
    for name, n in counts.items():
        if n < 0:
            raise DpauditError(f"--{name} must be >= 0, got {n}")
