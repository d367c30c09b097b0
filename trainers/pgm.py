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
"""

from __future__ import annotations

import torch

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

    def add(self, grad_sample: dict) -> None:
        """``grad_sample``: parameter name -> (b, *shape) per-example gradients."""
        vecs, norms = {}, None
        for p in self.parts:
            scale = 1.0 if self.variant == "dp_mg" else p.size ** (1 / self.alpha)
            for n in p.params:
                v = grad_sample[n] / scale
                if self.variant == "dp_mgna":
                    v = v.abs()
                vecs[n] = v
                part = _power_sum(v, self.alpha)
                norms = part if norms is None else norms + part
        total = norms ** (1 / self.alpha)
        factor = (self.threshold / (total + 1e-12)).clamp(max=1.0)
        for n, v in vecs.items():
            self.sums[n] += (v * factor.view(-1, *([1] * (v.dim() - 1)))).sum(0)

    def values(self) -> torch.Tensor:
        """mu_P for every partition of R, in order (a tensor on the parameters' device)."""
        out = []
        for p in self.parts:
            total = sum(_power_sum(self.sums[n].unsqueeze(0), self.alpha)[0] for n in p.params) ** (1 / self.alpha)
            out.append(total / p.size ** (1 / self.alpha) if self.variant == "dp_mg" else total)
        return torch.stack(out)


def pgms(model, batches, parts: list[Partition], variant: str = "dp_mgna", alpha: float = 1, c: float = 1.0,
         choices=None) -> torch.Tensor:
    """The PGMs of ``parts`` on the examples of ``batches`` ((ids, mask, targets) tensors), no noise.

    Only the parameters of ``parts`` get per-example gradients; the model runs in training mode, as in the
    training phase, and its mode and ``requires_grad`` flags are restored afterwards."""
    from opacus import GradSampleModule

    wanted = {n for p in parts for n in p.params}
    named = dict(model.named_parameters())
    flags = {n: q.requires_grad for n, q in named.items()}
    was_training = model.training
    model.train()  # as in the training phase (dropout on); Opacus captures activations in training mode only
    for n, q in named.items():
        q.requires_grad_(n in wanted)
    gsm = GradSampleModule(model, batch_first=True, loss_reduction="sum")
    acc = Accumulator(parts, {n: named[n] for n in wanted}, variant, alpha, c)
    try:
        for ids, mask, tgt in batches:
            if ids.size(0) == 0:
                continue
            ids, mask, tgt = trim(ids, mask, tgt)
            per_sample_loss(forward(gsm, ids, mask), tgt, choices).sum().backward()
            acc.add({n: named[n].grad_sample for n in wanted})
            gsm.zero_grad(set_to_none=True)
    finally:
        gsm._close()
        model.train(was_training)
        for n, q in named.items():
            q.requires_grad_(flags[n])
            q.grad = None
            if hasattr(q, "grad_sample"):
                q.grad_sample = None
    return acc.values()
