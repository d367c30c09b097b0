"""How hard clipping bites: per logical step, the fraction of privacy units whose gradient norm
exceeded C and the median per-unit gradient norm.

When every unit is clipped at every step, the update is the mean of gradient *directions* (Li et al.'s
small-C regime); that can be what a method intends, but it is also how a DP run silently stalls on a
plateau (reports/li_repro_minilm_c_sweep). The numbers go into run.json (``train_result.
clipping``) and the report, so a user sees it without re-running anything.

Norms are read from what the engine already computed: ``p.grad_sample`` (Opacus hooks),
``per_sample_gradient_norms`` (Opacus ghost clipping), or the per-user gradients (user-level DP).
"""

from __future__ import annotations

import torch


def unit_norms(grads: list[torch.Tensor]) -> torch.Tensor:
    """Norm of each unit's whole gradient: ``grads`` holds one (units, *param_shape) tensor per parameter."""
    return torch.stack([G.flatten(1).float().pow(2).sum(1) for G in grads], dim=0).sum(0).sqrt()


def grad_sample_norms(params) -> torch.Tensor | None:
    """Per-sample gradient norms over all trainable parameters, from Opacus' ``grad_sample`` (hooks)."""
    grads = [p.grad_sample for p in params if p.requires_grad and getattr(p, "grad_sample", None) is not None]
    return unit_norms(grads) if grads else None


def module_norms(module, params) -> torch.Tensor | None:
    """Per-sample norms of the last backward: ghost clipping stores them on the module, hooks in grad_sample."""
    if hasattr(module, "per_sample_gradient_norms"):
        try:
            return module.per_sample_gradient_norms.detach()
        except (AttributeError, ValueError):  # Opacus raises when no backward has run
            return None
    return grad_sample_norms(params)


class ClipStats:
    """Accumulates per-unit norms over the physical batches of one logical step."""

    def __init__(self, clipping_norm: float):
        self.clipping_norm = float(clipping_norm)
        self._buffer: list[torch.Tensor] = []
        self.fraction_clipped: list[float | None] = []
        self.median_norm: list[float | None] = []

    def observe(self, norms: torch.Tensor | None) -> None:
        if norms is not None and norms.numel():
            self._buffer.append(norms.detach().float().reshape(-1).cpu())

    def end_step(self) -> None:
        """Close a logical step (an empty Poisson batch records None)."""
        if not self._buffer:
            self.fraction_clipped.append(None)
            self.median_norm.append(None)
            return
        n = torch.cat(self._buffer)
        self._buffer = []
        # Opacus scales by min(1, C / (norm + 1e-6)): a unit is clipped when its norm exceeds C
        self.fraction_clipped.append(round(float((n > self.clipping_norm).float().mean()), 4))
        self.median_norm.append(float(f"{float(n.median()):.4g}"))

    def summary(self) -> dict:
        seen = [(f, m) for f, m in zip(self.fraction_clipped, self.median_norm) if f is not None]
        fr = [f for f, _ in seen]
        med = [m for _, m in seen]
        return {
            "clipping_norm": self.clipping_norm,
            "steps_observed": len(seen),
            "mean_fraction_clipped": round(sum(fr) / len(fr), 4) if fr else None,
            "fraction_clipped_first": fr[0] if fr else None,
            "fraction_clipped_last": fr[-1] if fr else None,
            "median_norm_first": med[0] if med else None,
            "median_norm_last": med[-1] if med else None,
            "all_clipped_every_step": bool(fr) and all(f == 1.0 for f in fr),
            "none_clipped_any_step": bool(fr) and all(f == 0.0 for f in fr),
            "per_step": {"fraction_clipped": self.fraction_clipped, "median_norm": self.median_norm},
        }

