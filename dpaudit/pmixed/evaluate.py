"""The model's work of ``dpaudit evaluate DEPLOYMENT`` for PMixED (the steps are :mod:`dpaudit.pmixed.steps`):
utility through the protocol, the exact check of the per-query claim, and the canaries' black-box queries
through the sampled tokens. Nothing here writes or judges.

* **Perplexity** (teacher-forced, the paper's evaluation): at every position of the held-out users' texts
  (BOS + text + EOS, cut at max_len, the tokens :func:`dpaudit.tasks.userlm.metrics` scores) the public
  model p0, the non-private ensemble (the mean of all N models) and PMixED's answer distribution (S_t
  sampled, beta and lambdas as the deployment computes them). The positions are split into runs of T
  queries, each run a fresh budget (as the paper's runs of T = 1024): the perplexity is that of a user who
  spends whole budgets on this text. Distributions are the evaluator's view only.
* **Exact check** (dpaudit.pmixed.audit) over the canary-secret queries of the inserted canaries and the first
  queries users asked (the deployment's transcript.jsonl, when there is one): the real
  per-query RDP against every partition, against the claimed eps_RDP / T; the worst query asked T times gives
  a lower value of the true epsilon (an accounting result ``pmixed_exact``).
* **Black-box audit**: every canary's secret tokens queried through the protocol with their true prefix
  (one query per secret token, within one budget of T), score = how many of them the deployment emits (ties
  broken by a seeded coin fixed before any query); the audit step reads them (:func:`dpaudit.pmixed.steps.audit`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from dpaudit import checkpoint, progress
from dpaudit.accounting import AccountingResult
from dpaudit.claim.reaccount import ClaimAccounting, reaccount
from dpaudit.errors import DpauditError
from dpaudit.pmixed import audit as exact
from dpaudit.pmixed import mixing
from dpaudit.pmixed.deployment import Deployment, partition_of
from dpaudit.tokens import bos_id, frame_text

ATTACK = "extraction"


def _framed(tok, text: str, max_len: int) -> list[int]:
    return frame_text(tok, text)[:max_len]


# (member, position) rows x vocabulary solved at once: 2 MB of float64 per tensor, which stays in the CPU's cache
# through the bisection's 60 passes (measured on the test deployment's 426 texts: 13.6 s one text at a time, 8.9 s
# at 2^18, 15 s at 2^20, 23.5 s at 2^24, where every pass streams the tensors from memory)
ROW_ELEMENTS = 1 << 18


def perplexity(dep: Deployment, texts: list[str], seed: int) -> dict:
    """Token-weighted perplexity of p0, the non-private ensemble and PMixED over the same positions. The lambdas
    of many texts' (member, position) rows are solved in one batch (up to :data:`ROW_ELEMENTS` entries), each row as
    it would be alone; the sums run in the order of the texts and positions."""
    g = dep.generator(seed)
    nll = {"public": 0.0, "ensemble": 0.0, "pmixed": 0.0}
    n_tok, subset_sizes, lambdas = 0, [], []
    a, N = dep.spec.alpha, dep.spec.n_models
    pending: list = []  # texts whose PMixED terms wait for their rows' lambdas, in order

    def flush() -> None:
        rows = [x[2] for x in pending if x[2] is not None]
        comp_all = None
        if rows:
            lp, lp_0, radius, yy = (torch.cat([x[i] for x in rows]) for i in range(4))
            lam = mixing.solve_lambda(lp, lp_0, radius, a)
            comp_all = mixing.mollify(lp, lp_0, lam).gather(-1, yy[:, None]).squeeze(-1)
            lambdas.extend(lam.tolist())
        at = 0
        for lp0_y, subsets, _ in pending:
            for t, s in enumerate(subsets):
                subset_sizes.append(len(s))
                if not s:
                    nll["pmixed"] -= float(lp0_y[t])
                    continue
                nll["pmixed"] -= float(torch.logsumexp(comp_all[at:at + len(s)], 0) - math.log(len(s)))
                at += len(s)
        pending.clear()

    held = 0
    for text in progress.bar(texts, desc="PMixED perplexity"):
        ids = torch.tensor(_framed(dep.tokenizer, text, dep.spec.max_len), device=dep.device)
        if len(ids) < 2:
            continue
        lp0, lps = dep.next_token_logprobs(ids)
        y = ids[1:]
        lp0, lps = lp0[:-1], lps[:, :-1]
        nll["public"] -= float(lp0.gather(-1, y[:, None]).sum())
        ens = torch.logsumexp(lps, dim=0) - math.log(N)
        nll["ensemble"] -= float(ens.gather(-1, y[:, None]).sum())
        subsets = [dep.sample_subset(g) for _ in range(len(y))]
        rows = [(t, k) for t, s in enumerate(subsets) for k in s]  # by position, then member: contiguous per t
        batch = None
        if rows:
            tt = torch.tensor([r[0] for r in rows], device=dep.device)
            kk = torch.tensor([r[1] for r in rows], device=dep.device)
            radius = torch.tensor([dep.spec.betas[len(subsets[t]) - 1] * a for t, _ in rows], dtype=torch.float64,
                                  device=dep.device)
            batch = (lps[kk, tt], lp0[tt], radius, y[tt])
            held += len(rows) * lp0.shape[-1]
        pending.append((lp0.gather(-1, y[:, None]).squeeze(-1), subsets, batch))  # p0 of each true token
        n_tok += len(y)
        if held >= ROW_ELEMENTS:
            flush()
            held = 0
    flush()
    if n_tok == 0:
        raise DpauditError("no held-out tokens to evaluate perplexity on; check task.n_test")
    out = {k: math.exp(v / n_tok) for k, v in nll.items()}
    sizes = np.array(subset_sizes)
    return {**out, "tokens": n_tok, "runs_of_T": math.ceil(n_tok / dep.spec.queries),
            "mean_subset_size": float(sizes.mean()), "empty_subset_fraction": float(np.mean(sizes == 0)),
            "mean_lambda": float(np.mean(lambdas)) if lambdas else 0.0,
            "median_lambda": float(np.median(lambdas)) if lambdas else 0.0}


def secret_span(tok, prefix: str, text: str, secret: str) -> tuple[list[int], int, int]:
    """(framed ids of the canary, first and end index of the tokens that carry its secret)."""
    full = frame_text(tok, text)

    def common(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    start = common(full, [bos_id(tok)] + tok(prefix, add_special_tokens=False).input_ids)
    end = common(full, [bos_id(tok)] + tok(prefix + secret, add_special_tokens=False).input_ids)
    end = max(end, start + 1)
    return full, start, end


def canary_audit(dep: Deployment, man, seed: int, whitebox_queries: int) -> dict:
    """Black-box extraction scores of every canary (one budget of T) and the exact divergences of the
    first ``whitebox_queries`` secret-token queries of the inserted canaries."""
    tok, spec = dep.tokenizer, dep.spec
    spans = [secret_span(tok, man.plan.canary_prefix(i), c.text, c.secret) for i, c in enumerate(man.canaries)]
    need = sum(e - s for _, s, e in spans)
    if need > spec.queries:
        raise DpauditError(f"the canary audit needs {need} queries ({man.plan.m} canaries x their secret tokens) but "
                           f"one budget is T = {spec.queries}; use fewer canaries (canaries.m) or shorter secrets")
    g = dep.generator(seed)
    tie = np.random.default_rng([man.plan.seed, 11]).uniform(0, 0.5, len(man.canaries))  # fixed before any query
    scores, whitebox, owners = [], [], []
    for c, (ids, s, e), u in progress.bar(list(zip(man.canaries, spans, tie)), desc="PMixED canaries"):
        x = torch.tensor(ids, device=dep.device)
        lp0, lps = dep.next_token_logprobs(x)
        hits = 0
        for j in range(s, e):  # query: context ids[:j], secret token ids[j]
            subset = dep.sample_subset(g)
            logp, _, _ = dep.answer_distribution(lp0[j - 1], lps[subset, j - 1], subset)
            y = int(torch.multinomial(torch.exp(logp), 1, generator=g).item())
            hits += int(y == ids[j])
            if c.inserted and len(whitebox) < whitebox_queries:
                d = exact.query_divergences(lp0[j - 1], lps[:, j - 1], spec.betas, spec.alpha, spec.sample_rate)
                whitebox.append(d.detach().to("cpu").numpy())
                owners.append((c.id, partition_of(c.user or c.id, spec.n_models, spec.partition_salt), j, lp0[j - 1],
                               lps[:, j - 1]))
        scores.append(hits + u)
    return {"scores": np.array(scores), "queries": need, "whitebox": np.array(whitebox).reshape(-1, spec.n_models),
            "owners": owners}


def transcript_queries(dep: Deployment, limit: int) -> tuple[np.ndarray, list]:
    """Exact divergences of the first ``limit`` queries users asked (the deployment's transcript.jsonl)."""
    from dpaudit.pmixed.deployment import read_transcript

    spec, wb, owners = dep.spec, [], []
    for e in progress.bar(read_transcript(dep.path)[:limit], desc="PMixED transcript"):
        x = torch.tensor(e["context"][-spec.max_len:], device=dep.device)
        lp0, lps = dep.next_token_logprobs(x)
        wb.append(exact.query_divergences(lp0[-1], lps[:, -1], spec.betas, spec.alpha, spec.sample_rate)
                  .detach().to("cpu").numpy())
        owners.append((f"transcript t={e['t']}", -1, len(x) - 1, lp0[-1], lps[:, -1]))
    return np.array(wb).reshape(-1, spec.n_models), owners


def exact_check(dep: Deployment, wb: np.ndarray, owners: list, delta: float) -> dict:
    spec = dep.spec
    s = exact.summarise(wb, spec.per_query, spec.rdp_budget, spec.queries)
    if not len(wb):
        return {**s, "epsilon_lower": None}
    q_idx, i = s["worst_query"], s["worst_partition"]
    cid, owner, pos, lp0, lps = owners[q_idx]
    log_p, log_q = exact.worst_pair(lp0, lps, spec.betas, spec.alpha, spec.sample_rate, i)
    eps_lo = exact.repeated_query_epsilon(log_p, log_q, spec.queries, delta)
    owner_d = [float(wb[k, o[1]]) for k, o in enumerate(owners) if o[1] >= 0]
    return {**s, "worst_query_canary": cid, "worst_query_position": pos, "worst_is_owner": bool(owner == i),
            "owner_max_per_query": max(owner_d, default=None), "epsilon_lower": eps_lo}


def accounting(card, ex: dict) -> ClaimAccounting:
    """The card's accounting check with the exact check's lower value joined (:meth:`ClaimAccounting.joined`)."""
    acct = reaccount(card)
    if ex.get("epsilon_lower") is not None:
        acct = acct.joined(AccountingResult(
            "pmixed_exact", None, card.claim.delta, lower=ex["epsilon_lower"], relation="add_remove",
            detail=f"exact: the worst of {ex['queries_checked']} logged queries asked T = "
                   f"{card.events[0].queries} times, PLD optimistic; no upper value exists"), card.claim)
    if acct.status == "unverifiable" and acct.certified_epsilon is None:
        lo = acct.lower_epsilon
        acct = replace(acct, reason="no accountant gives PMixED an upper value (its claim rests on the paper's "
                                    "per-query bound, which needs the divergence bound at every Rényi order and "
                                    "enforces it at one)" + (f"; the exact check places the true epsilon at >= "
                                                             f"{lo:.3g}, not above the claim" if lo is not None
                                                             else ""))
    return acct


def task_data(run: dict):
    """The task data a deployment's run record names (None without one), refused when it no longer matches the
    fingerprint the deployment was trained on."""
    if not run.get("task"):
        return None
    from dpaudit.tasks import registry

    data = registry.load_data(run["task"])
    if run.get("data", {}).get("fingerprint") not in (None, data.fingerprint()):
        raise DpauditError(f"the task data no longer matches the deployment's fingerprint "
                           f"{run['data']['fingerprint']}; restore the data it was trained on")
    return data


def content_hash(path: Path) -> str:
    """The deployment's weights, card, manifest and spec (not its run record, ledger or transcript)."""
    return checkpoint.content_hash(Path(path), Path(path).rglob("*"),
                                   skip=lambda f: f.name in ("run.json", "ledger.json"))
