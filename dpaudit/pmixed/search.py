"""The worst query of a PMixED deployment, searched: the contexts that maximise the exact per-query divergence of
the deployed ensemble, and the realised subsets that maximise the conditional quantity the paper's proof bounds.

No closed form gives the worst context, so this is a search, and what it reports are *found* values. Every number
it writes is exact (the full vocabulary, the deployment's own lambda bisection, the output law marginalised over
S_t: :func:`dpaudit.pmixed.audit.query_divergences`), so the largest is a valid lower value on the supremum over
contexts of the per-query RDP, never a certificate that no context does worse.

* **Pool** — every position of the texts given (a position is the query "which token follows this context",
  the context cut to the deployment's max_len), the public model and all N adapters by one forward pass each.
* **Screen** — the same divergences on a coarsened vocabulary (:func:`coarsen`: the K tokens most likely under
  any of the N + 1 models, plus one bucket for the rest), lambdas solved on the coarsened laws. A ranking only:
  it costs about K/V of the exact computation.
* **Exact** — the full divergences of the positions the screen ranks highest.
* **Local search** — from the best exact contexts, rounds of one-token edits (:func:`edits`: append one of the
  worst partition's likeliest next tokens, replace a position by a random token, drop the first text token),
  screened, the best few checked exactly; an edit is kept when its exact value is larger.
* **Subsets** — for the worst context, D^<->(p_S || p_{S - i}) over every realised subset S containing i
  (:func:`subset_divergences`), with the lambdas of |S| - 1 models as the deployment recomputes them and with
  p_S's lambdas kept (the proof's coupling), against the base loss Thm 5.1 claims for |S| models.

The deployment's radius is beta(|S_t|) of its pmixed.json reading; :func:`run` also re-evaluates the worst
contexts with the other reading of Thm C.4 (``reading="theorem"``: eps(k) at order k inside the binomial
bound, larger betas) to check that reading exactly too.

(Over 300 lines on purpose: the pool, screen and exact stages share one deployment's tensors and lambda solver;
split apart, each would hand all of them to the next.)
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import torch

from dpaudit import progress
from dpaudit.accounting import pmixed_rdp
from dpaudit.markup import md_code, md_tree
from dpaudit.pmixed import audit, mixing
from dpaudit.pmixed.spec import PMixedSpec

SCREEN_TOKENS = 256  # K: the coarsened vocabulary of the screen (plus one bucket for the rest)
SCREEN_CHUNK = 256  # positions screened at once (memory: chunk x N x N x (K + 1) float64 per tensor)


@dataclasses.dataclass(frozen=True)
class Found:
    """One query: its context (token ids, BOS first), where it came from, its exact divergence against each
    partition."""

    context: tuple[int, ...]
    source: str
    divergences: tuple[float, ...]

    @property
    def worst(self) -> float:
        return max(self.divergences)

    @property
    def partition(self) -> int:
        return int(np.argmax(self.divergences))


def coarsen(lp0: torch.Tensor, lps: torch.Tensor, k: int = SCREEN_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p0, log p_j) on the K tokens likeliest under any model plus one bucket for the rest: shapes
    (P, K + 1) and (P, N, K + 1) from (P, V) and (P, N, V). Every law stays normalised."""
    k = min(k, lp0.shape[-1])
    top = torch.maximum(lp0, lps.max(dim=-2).values).topk(k, dim=-1).indices  # (P, K)
    c0 = lp0.gather(-1, top)
    cs = lps.gather(-1, top.unsqueeze(-2).expand(*lps.shape[:-1], k))

    def rest(c):
        mass = torch.logsumexp(c, dim=-1, keepdim=True).clamp(max=0.0)
        return torch.log(-torch.expm1(mass))  # -inf where the top tokens hold everything

    return torch.cat([c0, rest(c0)], -1), torch.cat([cs, rest(cs)], -1)


def screen(c0: torch.Tensor, cs: torch.Tensor, betas, alpha: int, q: float) -> torch.Tensor:
    """Leave-one-out divergences (P, N) of coarsened queries, in chunks (a ranking, not a bound)."""
    out = []
    for s in range(0, c0.shape[0], SCREEN_CHUNK):
        a, b = c0[s:s + SCREEN_CHUNK], cs[s:s + SCREEN_CHUNK]
        out.append(audit.query_divergences(a, b, betas, alpha, q))
    return torch.cat(out) if out else c0.new_empty((0, cs.shape[-2]))


def exact(dep, context: list[int], betas=None) -> tuple[float, ...]:
    """Exact per-query divergences (N,) of ``context`` against each partition, at the deployment's betas (or
    ``betas``), computed as :func:`dpaudit.pmixed.evaluate.canary_audit` does."""
    lp0, lps = dep.next_token_logprobs(torch.tensor(context, device=dep.device))
    spec = dep.spec
    d = audit.query_divergences(lp0[-1], lps[:, -1], spec.betas if betas is None else betas, spec.alpha,
                                spec.sample_rate)
    return tuple(float(x) for x in d.detach().to("cpu"))


def _batch_last(dep, contexts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p0, log p_j) at the last position of each context, right-padded in one batch: (B, V), (B, N, V).
    Causal attention: padding after a context never changes its logits."""
    ids = _padded(dep, contexts)
    last = torch.tensor([len(c) - 1 for c in contexts], device=dep.device)
    rows = torch.arange(len(contexts), device=dep.device)

    def at_last(k):
        return mixing.log_probs(dep._logits(ids, k)[rows, last])

    lp0 = at_last(None)
    return lp0, torch.stack([at_last(k) for k in range(dep.spec.n_models)], dim=1)


def _padded(dep, seqs: list[list[int]]) -> torch.Tensor:
    """Right-padded ids of ``seqs`` on the deployment's device (causal models: the padding after a sequence never
    changes its logits, so no mask is needed for the positions read)."""
    from dpaudit.tokens import pad_batch

    pad = dep.tokenizer.eos_token_id if dep.tokenizer.eos_token_id is not None else 0
    return pad_batch([list(x) for x in seqs], pad, dep.device)[0]


def pool(dep, texts: list[tuple[str, list[int]]], batch: int = 8, k: int = SCREEN_TOKENS, desc: str = "pool"
         ) -> tuple[list[tuple[tuple[int, ...], str]], torch.Tensor]:
    """Every position of ``texts`` ((source, framed ids)), screened: ([(context, source)], scores (P, N))."""
    spec = dep.spec
    queries, scores = [], []
    for s in progress.bar(range(0, len(texts), batch), desc=f"PMixED search: {desc}"):
        chunk = [(src, ids[:spec.max_len]) for src, ids in texts[s:s + batch] if len(ids) >= 2]
        if not chunk:
            continue
        x = _padded(dep, [ids for _, ids in chunk])
        valid = [(b, t) for b, (_, ids) in enumerate(chunk) for t in range(len(ids) - 1)]  # context ids[:t + 1]
        bb = torch.tensor([v[0] for v in valid], device=dep.device)
        tt = torch.tensor([v[1] for v in valid], device=dep.device)
        lp0 = mixing.log_probs(dep._logits(x, None)[bb, tt])
        lps = torch.stack([mixing.log_probs(dep._logits(x, j)[bb, tt]) for j in range(spec.n_models)], dim=1)
        c0, cs = coarsen(lp0, lps, k)
        del lp0, lps
        scores.append(screen(c0, cs, spec.betas, spec.alpha, spec.sample_rate).to("cpu"))
        queries += [(tuple(chunk[b][1][:t + 1]), chunk[b][0]) for b, t in valid]
    return queries, (torch.cat(scores) if scores else torch.empty((0, spec.n_models), dtype=torch.float64))


def edits(dep, context: tuple[int, ...], partition: int, n: int, rng: np.random.Generator, bos: int | None
          ) -> list[tuple[int, ...]]:
    """Up to ``n`` one-token edits of ``context``: the worst partition's likeliest next tokens appended (its
    confident continuations), random tokens at random positions (never the BOS), the first text token dropped."""
    out = []
    lp0, lps = dep.next_token_logprobs(torch.tensor(context, device=dep.device), [partition])
    if len(context) < dep.spec.max_len:
        for y in lps[0, -1].topk(max(1, n // 4)).indices.tolist():
            out.append(context + (int(y),))
    start = 1 if bos is not None and context and context[0] == bos else 0
    if len(context) - start >= 2:
        out.append(context[:start] + context[start + 1:])
    vocab = lp0.shape[-1]
    while len(out) < n and len(context) > start:
        pos = int(rng.integers(start, len(context)))
        tok = int(rng.integers(0, vocab))
        out.append(context[:pos] + (tok,) + context[pos + 1:])
    return list(dict.fromkeys(c for c in out if c != context))[:n]


def local_search(dep, start: Found, rounds: int, candidates: int, recheck: int, seed: int, bos: int | None
                 ) -> tuple[Found, list[float]]:
    """Hill-climb from ``start`` by one-token edits; returns the best found and the exact worst per round."""
    rng = np.random.default_rng(seed)
    spec, best, trail = dep.spec, start, [start.worst]
    for _ in range(rounds):
        cands = edits(dep, best.context, best.partition, candidates, rng, bos)
        if not cands:
            break
        lp0, lps = _batch_last(dep, [list(c) for c in cands])
        c0, cs = coarsen(lp0, lps)
        order = screen(c0, cs, spec.betas, spec.alpha, spec.sample_rate).max(dim=-1).values.argsort(descending=True)
        improved = False
        for j in order[:recheck].tolist():
            f = Found(cands[j], f"edit of {start.source}", exact(dep, list(cands[j])))
            if f.worst > best.worst:
                best, improved = f, True
        trail.append(best.worst)
        if not improved:
            break
    return best, trail


def subset_divergences(lp0: torch.Tensor, lps: torch.Tensor, spec: PMixedSpec, betas=None) -> dict:
    """The proof's conditional quantity for every realised subset S of the N models and every member i:
    D^<->(p_S || p_{S - i}) with p_{S - i}'s lambdas recomputed at beta(|S| - 1) ("recomputed") and kept from p_S
    ("coupled"), against Thm 5.1's base loss for |S| models at beta(|S|). Lambdas come from one table
    (lambda_j depends on p_j, p0 and the radius only), so every subset is exact."""
    betas = spec.betas if betas is None else betas
    n, a = lps.shape[0], spec.alpha
    lam = mixing.lambda_table(lps, lp0, betas, a)  # (N, N): column m - 1 = lambda at |S| = m

    def mix(members, size):
        if not members:
            return lp0
        return mixing.mixture(lps[members], lp0, lam[members, size - 1])

    worst = {"recomputed": (0.0, None), "coupled": (0.0, None)}
    ratio = (0.0, None)
    for size in range(1, n + 1):
        claim = pmixed_rdp.base_loss(a, betas[size - 1], size)
        for S in itertools.combinations(range(n), size):
            p = mix(list(S), size)
            for i in S:
                rest = [j for j in S if j != i]
                d_re = float(mixing.sym_renyi(p, mix(rest, size - 1), a))
                d_co = float(mixing.sym_renyi(p, mixing.mixture(lps[rest], lp0, lam[rest, size - 1]) if rest
                                              else lp0, a))
                for key, d in (("recomputed", d_re), ("coupled", d_co)):
                    if d > worst[key][0]:
                        worst[key] = (d, {"subset": list(S), "removed": i, "divergence": d, "claimed_base_loss": claim})
                if claim > 0 and max(d_re, d_co) / claim > ratio[0]:
                    ratio = (max(d_re, d_co) / claim, {"subset": list(S), "removed": i, "divergence": max(d_re, d_co),
                                                       "claimed_base_loss": claim})
    return {"subsets": 2 ** n - 1, "worst_recomputed": worst["recomputed"][1], "worst_coupled": worst["coupled"][1],
            "largest_ratio_to_claim": ratio[0], "largest_ratio": ratio[1]}


def other_reading(spec: PMixedSpec) -> PMixedSpec:
    return dataclasses.replace(spec, reading="theorem" if spec.reading == "code" else "code")


def run(dep, texts: list[tuple[str, list[int]]], *, exact_top: int = 64, starts: int = 4, rounds: int = 12,
        candidates: int = 24, recheck: int = 2, seed: int = 0, delta: float | None = None,
        baseline: list[tuple[tuple[int, ...], str]] = ()) -> dict:
    """The whole search (module docstring) over the positions of ``texts`` ((source, framed ids)); ``delta``:
    also the lower value of the true epsilon when the worst query is asked T times; ``baseline``: queries
    (context, source) checked exactly first, reported apart and used as starts too (the evaluation's canary
    queries, :func:`evaluation_queries`). Returns a JSON-ready dict.
    Over 8 parameters: the deployment and texts, then keyword options of the search, each with its default."""
    spec = dep.spec
    known = [Found(c, src, exact(dep, list(c))) for c, src in progress.bar(baseline, desc="PMixED search: baseline")]
    queries, scores = pool(dep, texts)
    worst_screen = scores.max(dim=-1).values if len(queries) else torch.empty(0)
    order = worst_screen.argsort(descending=True)[:exact_top].tolist()
    checked = [Found(queries[j][0], queries[j][1], exact(dep, list(queries[j][0])))
               for j in progress.bar(order, desc="PMixED search: exact")]
    pool_best = max(checked, key=lambda f: f.worst) if checked else None
    seeds = sorted(checked + known, key=lambda f: -f.worst)[:starts]
    trails, climbed = [], []
    for s_i, s in enumerate(progress.bar(seeds, desc="PMixED search: local")):
        best, trail = local_search(dep, s, rounds, candidates, recheck, seed + s_i, _bos(dep))
        climbed.append(best)
        trails.append({"from": s.source, "start": s.worst, "end": best.worst, "rounds": len(trail) - 1,
                       "trail": trail})
    every = checked + known + climbed
    worst = max(every, key=lambda f: f.worst)
    lp0, lps = dep.next_token_logprobs(torch.tensor(worst.context, device=dep.device))
    lp0, lps = lp0[-1], lps[:, -1]
    out = {
        "spec": spec.to_dict(), "betas": list(spec.betas), "claimed_per_query": spec.per_query,
        "pool": {"texts": len(texts), "positions": len(queries), "screen_tokens": SCREEN_TOKENS,
                 "exact_checked": len(checked), "best": _found(dep, pool_best) if pool_best else None,
                 "screen_vs_exact_spearman": _spearman([float(worst_screen[j]) for j in order],
                                                       [f.worst for f in checked])},
        "baseline": {"queries": len(known), "best": _found(dep, max(known, key=lambda f: f.worst)) if known else None},
        "local_search": {"starts": len(seeds), "rounds": rounds, "candidates": candidates, "trails": trails},
        "worst": {**_found(dep, worst), "ratio_to_claim": worst.worst / spec.per_query},
        "subsets": subset_divergences(lp0, lps, spec),
    }
    if delta is not None:
        log_p, log_q = audit.worst_pair(lp0, lps, spec.betas, spec.alpha, spec.sample_rate, worst.partition)
        out["worst"]["epsilon_lower_T_repeats"] = audit.repeated_query_epsilon(log_p, log_q, spec.queries, delta)
    alt = other_reading(spec)
    top = sorted(every, key=lambda f: -f.worst)[:8]
    alt_d = [exact(dep, list(f.context), alt.betas) for f in top]
    out["other_reading"] = {"reading": alt.reading, "betas": list(alt.betas), "claimed_per_query": alt.per_query,
                            "queries": len(top), "max_per_query": max(max(d) for d in alt_d),
                            "ratio_to_claim": max(max(d) for d in alt_d) / alt.per_query,
                            "subsets": subset_divergences(lp0, lps, alt, alt.betas)}
    return out


def _bos(dep) -> int | None:
    from dpaudit.tokens import bos_id

    return bos_id(dep.tokenizer)


def _found(dep, f: Found) -> dict:
    return {"source": f.source, "context_ids": list(f.context), "context_text": dep.tokenizer.decode(list(f.context)),
            "tokens": len(f.context), "partition": f.partition, "max_per_query": f.worst,
            "divergences": list(f.divergences)}


def _spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    from scipy.stats import spearmanr

    r = spearmanr(a, b).statistic
    return None if math.isnan(r) else float(r)


def deployment_texts(dep, path, per_partition: int, held_out: int, seed: int) -> list[tuple[str, list[int]]]:
    """The texts whose positions the search pools: every canary (inserted or not), up to ``per_partition``
    training records of each partition and ``held_out`` held-out texts, drawn with ``seed``; (source, framed
    ids). The records come from the deployment's run.json task, checked against its data fingerprint."""
    from pathlib import Path

    from dpaudit.canaries.manifest import load_manifest
    from dpaudit.pmixed.deployment import partition_of
    from dpaudit.pmixed.evaluate import task_data
    from dpaudit.run_folder import read_run_record
    from dpaudit.tokens import frame_text

    path, spec, tok = Path(path), dep.spec, dep.tokenizer
    man = load_manifest(path / "canaries.json")
    out = [(f"canary {c.id} ({'inserted' if c.inserted else 'not inserted'})", frame_text(tok, c.text))
           for c in man.canaries]
    data = task_data(read_run_record(path / "run.json"))
    if data is None:
        return out
    rng = np.random.default_rng(seed)
    parts: dict[int, list[str]] = {}
    for r in data.train:
        parts.setdefault(partition_of(r["user"], spec.n_models, spec.partition_salt), []).append(r["text"])
    for k in sorted(parts):
        pick = rng.permutation(len(parts[k]))[:per_partition]
        out += [(f"training record, partition {k}", frame_text(tok, parts[k][j])) for j in sorted(pick)]
    pick = rng.permutation(len(data.test))[:held_out]
    out += [("held-out text", frame_text(tok, data.test[j]["text"])) for j in sorted(pick)]
    return out


def render(r: dict) -> str:
    """SEARCH.md: what was searched, the worst found, the subsets, the other reading."""
    context = md_code(repr(r["worst"]["context_text"]))  # decoded model text, shown as it is inside a code span
    r = md_tree(r)  # every other input string escaped (dpaudit.markup)
    w, p, s, o = r["worst"], r["pool"], r["subsets"], r["other_reading"]
    spec = r["spec"]

    def sub(x):
        if not x:
            return "none"
        return (f"{x['divergence']:.6g} (S = {x['subset']}, removing {x['removed']}; Thm 5.1 claims "
                f"{x['claimed_base_loss']:.6g})")

    trails = "; ".join(f"{t['from']}: {t['start']:.6g} → {t['end']:.6g} in {t['rounds']} rounds"
                       for t in r["local_search"]["trails"]) or "none"
    L = [f"# PMixED worst-case query search: {r.get('checkpoint', {}).get('path', '')}", "",
         f"`{r.get('command', '')}`", "",
         f"Deployment: N = {spec['n_models']}, q = {spec['sample_rate']}, α = {spec['alpha']}, T = {spec['queries']}, "
         f"ε_G = {spec['epsilon']}, δ = {spec['delta']}, reading `{spec['reading']}` (β(1..N) = "
         f"{', '.join(f'{b:.4g}' for b in r['betas'])}); claimed per-query RDP ε_RDP/T = {r['claimed_per_query']:.6g}.",
         "",
         "| stage | what | worst exact per-query D_α found |", "|---|---|---|",
         f"| pool + screen | {p['positions']} positions of {p['texts']} texts, ranked on {p['screen_tokens']} + 1 "
         f"tokens | — |",
         f"| exact | top {p['exact_checked']} by screen (Spearman screen vs exact {_num(p['screen_vs_exact_spearman'])}) | "
         f"{p['best']['max_per_query']:.6g} ({p['best']['source']}) |" if p["best"] else "| exact | none | — |",
         (f"| evaluation's queries | the first {r['baseline']['queries']} canary secret-token queries `dpaudit evaluate` "
          f"checks | {r['baseline']['best']['max_per_query']:.6g} ({r['baseline']['best']['source']}) |"
          if r.get("baseline", {}).get("best") else "| evaluation's queries | none | — |"),
         f"| local search | {r['local_search']['starts']} starts × ≤ {r['local_search']['rounds']} rounds × "
         f"{r['local_search']['candidates']} edits | {trails} |",
         f"| **worst** | {w['source']}, {w['tokens']} tokens, against partition {w['partition']} | "
         f"**{w['max_per_query']:.6g}** = {w['ratio_to_claim']:.3g}× the claim |", ""]
    if "epsilon_lower_T_repeats" in w:
        L += [f"Asked T = {spec['queries']} times, the worst query gives true ε ≥ {w['epsilon_lower_T_repeats']:.3g} at "
              f"δ = {spec['delta']} (exact PLD, rounded down): a lower value, against the claimed {spec['epsilon']}.", ""]
    L += [f"Worst context (decoded): `{context}`", "",
          f"**Subsets** (the proof's conditional quantity at the worst context, all {s['subsets']} realised subsets "
          f"and each member): worst with β recomputed for |S| - 1: {sub(s['worst_recomputed'])}; worst with p_S's "
          f"lambdas kept: {sub(s['worst_coupled'])}; largest ratio to Thm 5.1's base loss "
          f"{s['largest_ratio_to_claim']:.3g}.", "",
          f"**The other reading of Thm C.4** (`{o['reading']}`: β(1..N) = {', '.join(f'{b:.4g}' for b in o['betas'])}), "
          f"the {o['queries']} worst contexts re-evaluated exactly with its betas: largest per-query D_α "
          f"{o['max_per_query']:.6g} = {o['ratio_to_claim']:.3g}× the same claim {o['claimed_per_query']:.6g}; its "
          f"subsets' largest ratio to the base loss {o['subsets']['largest_ratio_to_claim']:.3g}.", "",
          "Every value above is exact (full vocabulary, the deployment's lambda bisection, the law marginalised over "
          "S_t); the search is a heuristic, so the worst found is a lower value on the worst query, not a "
          "certificate that no context does worse.", ""]
    return "\n".join(L)


OUTPUTS = ("search.json", "SEARCH.md")  # what a search writes into its --out, replacing their namesakes


def write(r: dict, out, deployment) -> None:
    """search.json and SEARCH.md into ``out``, all at once (a failed write leaves nothing half-written)."""
    import json
    from pathlib import Path

    from dpaudit.folders import staged_folder
    from dpaudit.io import jsonable, shown_path
    from dpaudit.pmixed.evaluate import content_hash

    r["checkpoint"] = {"path": shown_path(deployment), "hash": content_hash(Path(deployment))}
    with staged_folder(Path(out)) as stage:
        (stage / "search.json").write_text(json.dumps(jsonable(r), indent=1) + "\n")
        (stage / "SEARCH.md").write_text(render(r))


def evaluation_queries(dep, path, limit: int) -> list[tuple[tuple[int, ...], str]]:
    """The first ``limit`` secret-token queries of the inserted canaries, in the order ``dpaudit evaluate``'s
    exact check logs them (:func:`dpaudit.pmixed.evaluate.canary_audit`): (context, source)."""
    from pathlib import Path

    from dpaudit.canaries.manifest import load_manifest
    from dpaudit.pmixed.evaluate import secret_span

    man, out = load_manifest(Path(path) / "canaries.json"), []
    for i, c in enumerate(man.canaries):
        ids, s, e = secret_span(dep.tokenizer, man.plan.canary_prefix(i), c.text, c.secret)
        for j in range(s, e):
            if c.inserted and len(out) < limit:
                out.append((tuple(ids[:j]), f"canary {c.id} secret token {j - s + 1} (evaluation query)"))
    return out


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"
