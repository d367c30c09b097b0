"""``dpaudit lmo``: LMO-DP's noise search (the paper's Alg. 3 with a stated objective) and the two accountings of
a given noise side by side: the paper's scalar claim and dpaudit's d-dimensional re-accounting."""

from __future__ import annotations

import json
import math

import click

from dpaudit import options
from dpaudit.io import DuplicateKey, printable, unique_keys
from dpaudit.markup import probability

_COMMON = [
    click.option("--delta", required=True, type=float, help="Target δ (the paper: 1e-10 for classification)."),
    click.option("--steps", required=True, type=int, help="Number of noisy steps T."),
    click.option("--sample-rate", required=True, type=float, help="Poisson sampling rate q = B / N."),
    click.option("--clipping-norm", default=1.0, show_default=True, type=float,
                 help="Clipping norm C (the paper uses 1; the noise scale is absolute, as in the paper)."),
    click.option("--draw", type=click.Choice(options.LMO_DRAWS), default="per_coordinate", show_default=True,
                 help="Whether one inverse scale Y serves a whole step or each coordinate draws its own (the paper "
                      "does not say; dpaudit's re-accounting depends on it)."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text."),
]


def _common(f):
    for opt in reversed(_COMMON):
        f = opt(f)
    return f


@click.group()
def lmo():
    """LMO-DP (Laplace noise of random scale): search its noise, and account a noise both ways."""


@lmo.command()
@click.option("--epsilon", required=True, type=float, help="Target ε for the paper's own (scalar) analysis.")
@_common
@click.option("--objective", type=click.Choice(options.LMO_OBJECTIVES), default="mean_abs", show_default=True,
              help="What the search minimises among the noises meeting the target: E|Z| (mean_abs) or Var Z.")
@click.option("--form", type=click.Choice(options.LMO_FORMS), default="sum", show_default=True,
              help="Y as a weighted sum of Gamma, Exp and Uniform parts (MGF = product), or one part picked with "
                   "probability a_k (weights rescaled to sum to 1).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def search(epsilon, delta, steps, sample_rate, clipping_norm, draw, as_json, objective, form, quiet):
    """Search the noise of least E|Z| (or Var Z) whose paper ε meets --epsilon (the paper's Alg 3)

    Then dpaudit's re-accounted ε of that noise on the d-dimensional gradient. The grid (printed) covers the shapes; the scale of Y is bisected for
    each grid point. The paper's own grid beyond a_k in [0.1, 0.9] is not reported."""
    from dpaudit.accounting import lmo_paper, validate_delta, validate_mechanism
    from dpaudit.errors import DpauditError

    validate_delta(delta)
    if not (math.isfinite(epsilon) and 0 < epsilon <= 1000):
        raise DpauditError(f"--epsilon must be a finite number in (0, 1000], got {epsilon}")
    validate_mechanism(1.0, sample_rate, steps)
    _check_clipping_norm(clipping_norm)
    from dpaudit import progress

    progress.set_quiet(quiet or as_json)
    res = lmo_paper.search(epsilon, delta, sample_rate, steps, clipping_norm, objective, form=form,
                           progress=lambda xs: progress.bar(xs, desc="LMO search"))
    _print(res.noise, res.claim, clipping_norm, draw, sample_rate, steps, delta, as_json,
           {"objective": objective, "objective_value": res.objective_value, "candidates": res.candidates,
            "feasible": res.feasible, "grid": lmo_paper.DEFAULT_GRID})


@lmo.command("account")
@click.option("--noise", "noise_json", required=True,
              help='The law of Y as JSON, e.g. \'{"a1": 0.3, "a2": 0.2, "a3": 0.5, "gamma_k": 2, "gamma_theta": 0.5, '
                   '"exp_rate": 5, "u_low": 0.5, "u_high": 1.5}\'.')
@_common
def account_noise(noise_json, delta, steps, sample_rate, clipping_norm, draw, as_json):
    """The paper's claimed ε and dpaudit's re-accounted ε of one noise, side by side."""
    from dpaudit.accounting import lmo_paper, validate_delta, validate_mechanism
    from dpaudit.accounting.lmo_noise import LmoNoise
    from dpaudit.errors import DpauditError

    validate_delta(delta)
    validate_mechanism(1.0, sample_rate, steps)
    _check_clipping_norm(clipping_norm)
    if len(noise_json) > 10_000:
        raise DpauditError(f"--noise is {len(noise_json):,} characters; the law of Y is a small JSON object like "
                           "'{\"a3\": 1, \"u_low\": 1, \"u_high\": 2}'")
    try:
        d = json.loads(noise_json, object_pairs_hook=unique_keys)
    except DuplicateKey as e:  # {"a1": 0.3, "a1": 0.9}: which weight the account is of would be the parser's choice
        raise DpauditError(f"--noise names {printable(str(e))!r} twice; give each parameter once") from None
    except json.JSONDecodeError as e:
        raise DpauditError(f"--noise is not valid JSON ({e.msg}); pass an object like '{{\"a3\": 1, \"u_low\": 1, "
                           "\"u_high\": 2}'") from None
    except RecursionError:
        raise DpauditError("--noise is nested too deeply; the law of Y is a flat JSON object like "
                           "'{\"a3\": 1, \"u_low\": 1, \"u_high\": 2}'") from None
    nz = LmoNoise.from_dict(d)
    claim = lmo_paper.claim(nz, clipping_norm, sample_rate, steps, delta)
    if not math.isfinite(claim.epsilon):
        raise DpauditError(f"the MGF of Y diverges at every order the paper's analysis needs (M_Y(t) is finite only for "
                           f"t < {nz.t_max():.4g}, and order 2 needs t = C = {clipping_norm:g}); make Y's Gamma and Exp "
                           "parts lighter (smaller a1 * theta, larger lambda / a2) or C smaller")
    _print(nz, claim, clipping_norm, draw, sample_rate, steps, delta, as_json, {})


def _check_clipping_norm(C: float) -> None:
    """Before any work (the search's grid takes seconds): a finite C > 0, not below the smallest normal float (its
    squares and products underflow to 0)."""
    from dpaudit.errors import DpauditError

    if not (math.isfinite(C) and C >= 1e-300):
        raise DpauditError(f"--clipping-norm must be a finite number >= 1e-300, got {C}")


def _print(nz, claim, C, draw, q, T, delta, as_json, extra):
    """The two accountings of one LMO-DP noise side by side (the paper's claim, dpaudit's vector accounting), as
    text or JSON. Over 8 parameters: the mechanism and its claim as `dpaudit lmo account` resolved them, printed
    together; internal to the command."""
    from dpaudit.accounting import lmo_vector
    from dpaudit.accounting.events import NotApplicable

    try:  # outside the range its numerics hold (C x E[Y] in [1e-6, 10], ...) it declines, as for a card
        lmo_vector.check_range(nz, C)
        vec, detail = lmo_vector.epsilon_for(nz, C, draw, q, T, delta)
    except NotApplicable as e:
        vec, detail = None, f"not applicable: {e}"
    out = {"noise": nz.to_dict(), "paper_epsilon": claim.epsilon, "paper_order": claim.order,
           "paper_floor": claim.floor, "paper_near_floor": claim.near_floor, "reaccounted_epsilon": vec,
           "reaccounted_detail": detail, "draw": draw, "mean_abs_noise": nz.mean_abs_noise(),
           "noise_std": math.sqrt(nz.noise_variance()), "delta": delta, "steps": T, "sample_rate": q,
           "clipping_norm": C, **extra}
    if as_json:
        click.echo(json.dumps(out))
        return
    if "grid" in extra:
        click.echo(f"searched {extra['candidates']} shapes ({extra['feasible']} feasible), minimising "
                   f"{extra['objective']}; grid: " + ", ".join(f"{k} {list(v)}" for k, v in extra["grid"].items()))
    click.echo("noise (train.lmo_noise): {" + ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f'{k} = "{v}"'
                                                         for k, v in nz.to_dict().items()) + "}")
    click.echo(f"noise per coordinate: E|Z| = {out['mean_abs_noise']:.4g}, std = {out['noise_std']:.4g} "
               f"(clipping norm C = {C:g})")
    floor = " — within 10% of the order grid's floor: the number mostly reflects the grid" if claim.near_floor else ""
    click.echo(f"paper's claim:      ε = {claim.epsilon:.4f} at δ = {probability(delta)} (order {claim.order}; floor "
               f"{claim.floor:.4f}){floor}")
    click.echo(f"dpaudit re-account: ε ≤ {vec:.4f} at δ = {probability(delta)} ({detail})" if vec is not None
               else f"dpaudit re-account: {detail}")
