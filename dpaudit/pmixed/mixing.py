"""PMixED's per-query mixing and the exact divergences of one query, in float64 log-space (torch).

Every distribution is a tensor of log-probabilities over the vocabulary (last axis), float64, on whatever
device the models run on: the deployment and the auditor call the same functions, on CPU in tests and on
CUDA where present. Zero probabilities are -inf and handled exactly (never NaN): D_alpha(P || Q) is +inf
when P puts mass where Q has none.

* :func:`renyi`, :func:`sym_renyi` — D_alpha(P || Q) = log sum P^a Q^(1-a) / (a-1) and max of both directions.
* :func:`solve_lambda` — Eq. 5: the largest lambda in [0, 1] with D^<->(lambda p_i + (1-lambda) p0 || p0) <=
  radius, by bisection that always returns the feasible end (the public code's 20-step bisection does not
  clamp and can return an infeasible lambda); lambda = 1 when already feasible.
* :func:`mixture` — Alg. 1's output for a realised subset: the mean of the mollified members (p0 if empty).
* :func:`marginal` — the exact output law of one query with Poisson subsampling at rate q marginalised over
  S_t (beta recomputed for each |S_t| as the deployment does): P(S = {})·p0 + sum_n sum_j
  q·Binom(n-1; N-1, q)/n · pbar_j^(n). With and without model i this is the mechanism's real neighbouring pair.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

BISECTION_STEPS = 60  # 2^-60: below float64 resolution of lambda


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    """Next-token log-probabilities in float64 (softmax in float32 underflows to exact zeros)."""
    return torch.log_softmax(logits.to(torch.float64), dim=-1)


def renyi(logp: torch.Tensor, logq: torch.Tensor, alpha: float) -> torch.Tensor:
    """D_alpha(P || Q) over the last axis (broadcasting), alpha > 1."""
    terms = alpha * logp + (1 - alpha) * logq
    terms = torch.where(torch.isneginf(logp), torch.full_like(terms, -math.inf), terms)
    return torch.logsumexp(terms, dim=-1) / (alpha - 1)


def sym_renyi(logp: torch.Tensor, logq: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.maximum(renyi(logp, logq, alpha), renyi(logq, logp, alpha))


def mollify(logp: torch.Tensor, logp0: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """log(lam p + (1 - lam) p0); ``lam`` broadcasts against the leading axes of ``logp``."""
    lam = torch.as_tensor(lam, dtype=torch.float64, device=logp.device)
    lam = lam.reshape(lam.shape + (1,) * (logp.dim() - lam.dim()))
    with torch.no_grad():
        a = torch.where(lam > 0, torch.log(lam) + logp, torch.full_like(logp, -math.inf))
        b = torch.where(lam < 1, torch.log1p(-lam) + logp0, torch.full_like(logp, -math.inf))
    return torch.logaddexp(a, b)


def solve_lambda(logp: torch.Tensor, logp0: torch.Tensor, radius, alpha: float,
                 steps: int = BISECTION_STEPS) -> torch.Tensor:
    """Eq. 5 for every row of ``logp`` (shape (..., V)) at ``radius`` (scalar or broadcastable to the rows):
    the largest feasible lambda found by bisection, never an infeasible one."""
    rows = logp.shape[:-1]
    radius = torch.as_tensor(radius, dtype=torch.float64, device=logp.device).expand(rows)
    lo = torch.zeros(rows, dtype=torch.float64, device=logp.device)
    hi = torch.ones(rows, dtype=torch.float64, device=logp.device)
    one_ok = sym_renyi(logp, logp0, alpha) <= radius
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok = sym_renyi(mollify(logp, logp0, mid), logp0, alpha) <= radius
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return torch.where(one_ok, torch.ones_like(lo), lo)


def mixture(logps: torch.Tensor, logp0: torch.Tensor, lambdas: torch.Tensor) -> torch.Tensor:
    """Alg. 1's output for the members ``logps`` (shape (n, V)) with their lambdas; p0 when n = 0."""
    if logps.shape[0] == 0:
        return logp0
    return torch.logsumexp(mollify(logps, logp0, lambdas), dim=0) - math.log(logps.shape[0])


def _log_binom_pmf(n: int, q: float, device) -> torch.Tensor:
    k = torch.arange(n + 1, dtype=torch.float64, device=device)
    lg = torch.lgamma
    nn = torch.tensor(float(n), dtype=torch.float64, device=device)
    out = lg(nn + 1) - lg(k + 1) - lg(nn - k + 1) + k * math.log(q)
    return out + ((nn - k) * math.log1p(-q) if q < 1 else torch.where(k == nn, 0.0, -math.inf))


def lambda_table(logps: torch.Tensor, logp0: torch.Tensor, betas: Sequence[float], alpha: int) -> torch.Tensor:
    """lambda_j at the radius beta(n)·alpha of every subset size n = 1..len(betas): shape (..., N, len(betas))
    for ``logps`` (..., N, V) and ``logp0`` (..., V) (leading axes: independent queries)."""
    radius = torch.tensor([b * alpha for b in betas], dtype=torch.float64, device=logps.device)
    n_sizes = len(betas)
    lp = logps.unsqueeze(-2).expand(*logps.shape[:-1], n_sizes, logps.shape[-1])
    return solve_lambda(lp, logp0.unsqueeze(-2).unsqueeze(-2), radius.expand(*logps.shape[:-1], n_sizes), alpha)


def marginal(logps: torch.Tensor, logp0: torch.Tensor, lambdas: torch.Tensor, q: float) -> torch.Tensor:
    """Exact log output law of one query over S_t ~ Poisson(q) of the models ``logps`` (..., N, V), given
    ``lambdas`` (..., N, >= N): column n-1 is the lambda each model uses when |S_t| = n. Leading axes are
    independent queries (``logp0`` (..., V))."""
    n_models = logps.shape[-2]
    empty = n_models * math.log1p(-q) if q < 1 else -math.inf
    if n_models == 0:
        return logp0
    sizes = torch.arange(1, n_models + 1, device=logps.device)
    # P(j in S, |S| = n) / n = q Binom(n - 1; N - 1, q) / n
    logw = math.log(q) + _log_binom_pmf(n_models - 1, q, logps.device) - torch.log(sizes.to(torch.float64))
    lp = logps.unsqueeze(-2).expand(*logps.shape[:-1], n_models, logps.shape[-1])  # (..., model j, size n, V)
    comps = mollify(lp, logp0.unsqueeze(-2).unsqueeze(-2), lambdas[..., :n_models])
    parts = torch.logsumexp(comps + logw.view(-1, 1), dim=(-3, -2))
    return torch.logaddexp(parts, logp0 + empty)


def leave_one_out(logps: torch.Tensor, logp0: torch.Tensor, lambdas: torch.Tensor, q: float, alpha: float
                  ) -> torch.Tensor:
    """D_alpha^<->(M_D || M_{D - partition i}) for every model i of one query: the exact per-query RDP of the
    deployment at order alpha against removing each partition (shape (..., N) for ``logps`` (..., N, V))."""
    n_models = logps.shape[-2]
    full = marginal(logps, logp0, lambdas, q)
    out = []
    for i in range(n_models):
        keep = [j for j in range(n_models) if j != i]
        out.append(sym_renyi(full, marginal(logps[..., keep, :], logp0, lambdas[..., keep, :], q), alpha))
    return torch.stack(out, dim=-1)
