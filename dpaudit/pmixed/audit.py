"""The exact white-box check of PMixED's per-query claim, and the lower bound it gives on the true epsilon.

Everything in one query is discrete and observable to the deployer, so nothing is estimated:

* per query x, for every partition i, D_alpha^<->(M_D(x) || M_{D - i}(x)) where M is the output law of
  Alg. 1 marginalised over S_t ~ Poisson(q) (beta recomputed for each |S_t|, in both worlds, as the
  deployment does): the exact per-query RDP at the paper's order, against its claimed per-query value
  eps_RDP / T (:func:`dpaudit.pmixed.mixing.leave_one_out`);
* the composed total: for a fixed (non-adaptive) list of queries the transcript's law is a product, so its
  Rényi divergence is exactly the sum over queries, per partition; the claim for k queries is k eps_RDP / T;
* a lower value of the true (eps, delta): an adversary may ask the worst logged query T times (within the
  budget), whose exact privacy loss distribution, composed T times by dp_accounting's PLD with the optimistic
  discretisation (losses rounded down), is a valid lower bound on the deployment's epsilon at delta.

The conditional quantity the paper's proof bounds, D(p_S || p_{S - i}) for the realised subset with the other
members' lambdas unchanged, is :func:`conditional`: it shows where the proof's single-order triangle inequality
fails (the two-token example of docs/methods.md), but it is not the mechanism's privacy, which the marginal is.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dpaudit.pmixed import mixing

PLD_GRID = 1e-3  # loss grid of one query's PLD handed to dp_accounting (optimistic: rounded down)


def query_divergences(lp0: torch.Tensor, lps: torch.Tensor, betas, alpha: int, q: float) -> torch.Tensor:
    """Exact D_alpha^<-> against removing each partition, for one query: (N,)."""
    lam = mixing.lambda_table(lps, lp0, betas, alpha)
    return mixing.leave_one_out(lps, lp0, lam, q, alpha)


def worst_pair(lp0: torch.Tensor, lps: torch.Tensor, betas, alpha: int, q: float, i: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(log M_D, log M_{D - i}) of one query as float64 NumPy arrays on the host (for the PLD)."""
    lam = mixing.lambda_table(lps, lp0, betas, alpha)
    keep = [j for j in range(lps.shape[0]) if j != i]
    full = mixing.marginal(lps, lp0, lam, q)
    rest = mixing.marginal(lps[keep], lp0, lam[keep], q)
    return full.detach().to("cpu").numpy(), rest.detach().to("cpu").numpy()


def repeated_query_epsilon(log_p: np.ndarray, log_q: np.ndarray, repeats: int, delta: float) -> float:
    """A lower value of the epsilon at ``delta`` of ``repeats`` independent answers to one query whose output
    laws are exp(log_p) and exp(log_q) (both directions; dp_accounting PLD, optimistic discretisation)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    keep = np.isfinite(log_p) | np.isfinite(log_q)
    a = {int(k): float(v) for k, v in zip(np.flatnonzero(keep), log_p[keep])}
    b = {int(k): float(v) for k, v in zip(np.flatnonzero(keep), log_q[keep])}
    out = 0.0
    for lower, upper in ((a, b), (b, a)):
        d = pld.from_two_probability_mass_functions(lower, upper, pessimistic_estimate=False,
                                                     value_discretization_interval=PLD_GRID)
        out = max(out, float(d.self_compose(repeats).get_epsilon_for_delta(delta)))
    return out


def conditional(lps: torch.Tensor, lp0: torch.Tensor, beta: float, alpha: int, i: int,
                beta_without: float | None = None) -> float:
    """D_alpha^<->(p_S || p_{S - i}) for the realised subset ``lps`` (members' rows): with the other members'
    lambdas as in p_S (the paper's Thm 5.1 coupling, ``beta_without`` None) or recomputed at the radius the
    deployment uses for |S| - 1 models (``beta_without``)."""
    lam = mixing.solve_lambda(lps, lp0, beta * alpha, alpha)
    p = mixing.mixture(lps, lp0, lam)
    keep = [j for j in range(lps.shape[0]) if j != i]
    lam_rest = lam[keep] if beta_without is None else mixing.solve_lambda(lps[keep], lp0, beta_without * alpha, alpha)
    return float(mixing.sym_renyi(p, mixing.mixture(lps[keep], lp0, lam_rest), alpha))


def summarise(per_query: np.ndarray, claim_per_query: float, rdp_budget: float, queries: int) -> dict:
    """``per_query`` (k, N): exact divergences of k logged queries against each partition."""
    k = per_query.shape[0]
    worst = per_query.max(axis=1)
    totals = per_query.sum(axis=0)
    return {"queries_checked": k, "claimed_per_query": claim_per_query,
            "max_per_query": float(worst.max()) if k else 0.0,
            "median_per_query": float(np.median(worst)) if k else 0.0,
            "queries_over_claim": int(np.sum(worst > claim_per_query * (1 + 1e-9))),
            "worst_query": int(np.argmax(worst)) if k else None,
            "worst_partition": int(np.unravel_index(np.argmax(per_query), per_query.shape)[1]) if k else None,
            "composed_total_max": float(totals.max()) if k else 0.0,
            "claimed_total_for_these": claim_per_query * k,
            "repeat_worst_total": float(worst.max()) * queries if k else 0.0,
            "claimed_rdp_budget": rdp_budget,
            "per_query_ratio": float(worst.max() / claim_per_query) if k and claim_per_query > 0 else math.nan}
