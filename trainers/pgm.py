"""Partition-wise gradient magnitudes (PGMs), DP-FROST's selection scores (Hong et al., Def. 6-9, Lemma 3).

For a set R of partitions (the ones not selected yet), per-example gradients g_P(x) and norm order alpha:

* ``dp_mg``:   mu_P = || [sum_x clip_c(g(x))]_P ||_alpha / |P|^(1/alpha),        L2 sensitivity c / (min |P|)^(1/alpha)
* ``dp_mgn``:  mu_P = || [sum_x clip_cbar(gbar(x))]_P ||_alpha,                   sensitivity cbar
* ``dp_mgna``: mu_P = || [sum_x clip_cbar(abs(gbar(x)))]_P ||_alpha (default),    sensitivity cbar

with gbar(x) = concat_P g_P(x) / |P|^(1/alpha), cbar = c / Pbar^(1/alpha), Pbar the mean size over R, and
clip_t(v) = min(1, t / ||v||_alpha) v over all of R's coordinates together. abs() comes before clipping
(DP-MGNA), so nothing cancels across examples. Per-example gradients come from Opacus' GradSampleModule
(hooks), micro-batch by micro-batch, so memory stays at (micro-batch x parameters of R); sums are kept on
the parameters' device. Sensitivities are for add/remove of one example.

Embedding tables are the exception: Opacus writes each example's gradient as a dense (vocabulary x width)
table, nearly all zeros (MiniLM's word embedding: 11.7M of its 22.7M parameters, 375 MB per micro-batch of 8),
which made the selection cost more than the training it serves. Here an embedding's per-example gradient is
kept sparse: the rows of the tokens an example holds, each the sum of the output gradients at that token's
positions (exactly what Opacus' scatter writes into those rows; the other rows are zero), so the norms and the
clipped sums are the same numbers from a few hundred rows per example (tests/trainers/test_dp_frost.py checks both
against a for-loop of backward passes).
"""

from __future__ import annotations

import torch

from dpaudit import opacus_private as op
from dpaudit import options
from dpaudit.errors import DpauditError
from dpaudit.trainers.loss import forward, per_sample_loss, trim
from dpaudit.trainers.partitions import Partition

VARIANTS = options.PGM_VARIANTS


def check(variant: str, alpha: float) -> None:
    if variant not in VARIANTS:
        raise DpauditError(f"train.frost.pgm must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if alpha not in (1, 2):
        raise DpauditError(f"train.frost.alpha must be 1 or 2, got {alpha!r}")


def clip_threshold(variant: str, c: float, alpha: float, parts: list[Partition]) -> float:
    """The clipping threshold of the variant: c for DP-MG, cbar = c / Pbar^(1/alpha) for the normalised ones."""
    return c if variant == "dp_mg" else c / (sum(p.size for p in parts) / len(parts)) ** (1 / alpha)


def sensitivity(variant: str, c: float, alpha: float, parts: list[Partition]) -> float:
    """L2 sensitivity of the vector (mu_P)_{P in parts} to adding or removing one example (Lemma 3)."""
    if variant == "dp_mg":
        return c / min(p.size for p in parts) ** (1 / alpha)
    return clip_threshold(variant, c, alpha, parts)


def _power_sum(t: torch.Tensor, alpha: float) -> torch.Tensor:
    """sum |t|^alpha over all but the first dimension of a (b, ...) tensor (alpha in {1, 2})."""
    t = t.flatten(1)
    return t.abs().sum(1) if alpha == 1 else t.pow(2).sum(1)


class Accumulator:
    """sum_x clip(transform(g(x))) per parameter of the partitions in R, fed with per-example gradients."""

    def __init__(self, parts: list[Partition], params: dict, variant: str, alpha: float, c: float):
        check(variant, alpha)
        self.parts, self.params, self.variant, self.alpha = parts, params, variant, alpha
        self.threshold = clip_threshold(variant, c, alpha, parts)
        self.sums = {n: torch.zeros_like(params[n]) for p in parts for n in p.params}

    def add(self, grad_sample: dict, sparse: dict | None = None) -> None:
        """``grad_sample``: parameter name -> (b, *shape) per-example gradients; ``sparse``: parameter name ->
        (example index (U,), row (U,), values (U, width)) for a table whose per-example gradients are zero
        outside the listed (example, row) pairs (:class:`SparseEmbeddingGrads`).

        One pass over each gradient: the partition's scale 1 / |P|^(1/alpha) is applied to the norms and to the
        per-example weights of the clipped sum, not to a scaled copy; abs() is taken once (DP-MGNA's values are
        non-negative, and alpha = 1 needs |g| anyway), in place for DP-MGNA (``grad_sample`` and ``sparse`` are
        consumed); the clipped sum is one matrix-vector product."""
        sparse = sparse or {}
        terms, norms = {}, None
        b = next(iter(grad_sample.values())).size(0) if grad_sample else int(max(int(e.max()) + 1 if e.numel() else 0
                                                                                 for e, _, _ in sparse.values()))
        for p in self.parts:
            inv = 1.0 if self.variant == "dp_mg" else p.size ** (-1 / self.alpha)
            for n in p.params:
                g = sparse[n][2] if n in sparse else grad_sample[n].flatten(1)
                if self.variant == "dp_mgna":
                    a = g.abs_()  # in place: the per-example gradients are this call's to consume
                else:
                    a = g.abs() if self.alpha == 1 else g
                part = (a.sum(1) if self.alpha == 1 else a.pow(2).sum(1)) * inv ** self.alpha
                if n in sparse:
                    part = torch.zeros(b, dtype=part.dtype, device=part.device).index_add_(0, sparse[n][0], part)
                terms[n] = (a if self.variant == "dp_mgna" else g, inv)
                norms = part if norms is None else norms + part
        total = norms ** (1 / self.alpha)
        factor = (self.threshold / (total + 1e-12)).clamp(max=1.0)
        for n, (t, inv) in terms.items():
            w = factor * inv
            if n in sparse:
                example, index, _ = sparse[n]
                self.sums[n].index_add_(0, index, t * w[example].unsqueeze(1))
            else:
                self.sums[n] += (w.to(t.dtype) @ t).view_as(self.sums[n])

    def values(self) -> torch.Tensor:
        """mu_P for every partition of R, in order (a tensor on the parameters' device)."""
        out = []
        for p in self.parts:
            total = sum(_power_sum(self.sums[n].unsqueeze(0), self.alpha)[0] for n in p.params) ** (1 / self.alpha)
            out.append(total / p.size ** (1 / self.alpha) if self.variant == "dp_mg" else total)
        return torch.stack(out)


class SparseEmbeddingGrads:
    """Per-example gradients of embedding tables, as (example, row, values) triples, for the tables named in
    ``names`` (``{parameter name: nn.Embedding}``). While installed, each table's weight is out of autograd and its
    output is a leaf that keeps its gradient; :meth:`collect` turns the saved token ids and output gradients into
    the triples: one entry per (example, distinct token), the sum of the output gradients at that token's
    positions."""

    def __init__(self, tables: dict):
        self.tables, self.ids, self.outputs, self.handles = tables, {}, {}, []

    def __enter__(self):
        for name, mod in self.tables.items():
            mod.weight.requires_grad_(False)
            self.handles.append(mod.register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles, self.ids, self.outputs = [], {}, {}

    def _hook(self, name):
        def fwd(_mod, inputs, output):
            self.ids[name] = inputs[0]
            output.requires_grad_(True)  # a leaf (the weight is out of autograd): its .grad is the output gradient
            self.outputs[name] = output
            return output
        return fwd

    def collect(self) -> dict:
        out = {}
        for name, mod in self.tables.items():
            ids, grad = self.ids[name], self.outputs[name].grad
            width = grad.size(-1)
            example = torch.arange(ids.size(0), device=ids.device).unsqueeze(1).expand_as(ids)
            keys = (example * mod.num_embeddings + ids).reshape(-1)
            unique, inverse = torch.unique(keys, return_inverse=True)
            rows = torch.zeros(unique.numel(), width, dtype=grad.dtype, device=grad.device)
            rows.index_add_(0, inverse, grad.reshape(-1, width))
            out[name] = (unique // mod.num_embeddings, unique % mod.num_embeddings, rows)
            self.outputs[name].grad = None
        return out


def _untied_tables(model, wanted: set) -> dict:
    """{parameter name: nn.Embedding} for the embedding tables among ``wanted`` that no other layer shares (a
    table tied to an output layer keeps Opacus' dense path: its gradient is not only the table's rows)."""
    owners: dict[int, int] = {}
    for _, mod in model.named_modules():
        for q in mod.parameters(recurse=False):
            owners[id(q)] = owners.get(id(q), 0) + 1
    out = {}
    for m, mod in model.named_modules():
        name = f"{m}.weight" if m else "weight"
        if isinstance(mod, torch.nn.Embedding) and name in wanted and owners[id(mod.weight)] == 1:
            out[name] = mod
    return out


def pgms(model, batches, parts: list[Partition], variant: str = "dp_mgna", alpha: float = 1, c: float = 1.0,
         choices=None, sparse_tables: bool = True) -> torch.Tensor:
    """The PGMs of ``parts`` on the examples of ``batches`` ((ids, mask, targets) tensors), no noise.

    Only the parameters of ``parts`` get per-example gradients; the model runs in training mode, as in the
    training phase, and its mode and ``requires_grad`` flags are restored afterwards. ``sparse_tables=False``
    gives embedding tables Opacus' dense per-example gradients too (the same values, slower: for comparison)."""
    from opacus import GradSampleModule

    wanted = {n for p in parts for n in p.params}
    named = dict(model.named_parameters())
    flags = {n: q.requires_grad for n, q in named.items()}
    was_training = model.training
    model.train()  # as in the training phase (dropout on); Opacus captures activations in training mode only
    for n, q in named.items():
        q.requires_grad_(n in wanted)
    tables = _untied_tables(model, wanted) if sparse_tables else {}
    dense = wanted - set(tables)
    acc = Accumulator(parts, {n: named[n] for n in wanted}, variant, alpha, c)
    try:
        with SparseEmbeddingGrads(tables) as sparse:  # before Opacus wraps the model: it skips the frozen tables
            gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
            try:
                for ids, mask, tgt in batches:
                    if ids.size(0) == 0:
                        continue
                    ids, mask, tgt = trim(ids, mask, tgt)
                    per_sample_loss(forward(gsm, ids, mask), tgt, choices).sum().backward()
                    acc.add({n: named[n].grad_sample for n in dense}, sparse.collect())
                    gsm.zero_grad(set_to_none=True)
            finally:
                op.close(gsm)
    finally:
        model.train(was_training)
        for n, q in named.items():
            q.requires_grad_(flags[n])
            q.grad = None
            if hasattr(q, "grad_sample"):
                q.grad_sample = None
    return acc.values()
