"""Book-keeping's per-layer formulas (trainers/bk_clipping.py), batched over the layers that share a shape.

After the one backward every trainable layer has its input ``a`` and its output gradient ``g``. Layer by layer the
norms and clipped sums are a dozen small kernels each: on a GPU at batch 16 x 128, SmolLM2-135M's 270 layers spend
more time launching them than computing (reports/bench/gpu.md). Layers of one kind whose ``a`` and ``g`` have the
same shapes (the q and o projections of every block, the gate and up projections, every RMS norm) are therefore
laid end to end along the batch dimension, ``L`` layers of ``B`` examples as one batch of ``L * B``, and each formula
runs once for the group: the per-example squared norms come back as an ``(L, B)`` table, the clipped weight sums
as one batched product ``(L, p, d)`` whose slices become each layer's ``.grad``.

A group holds at most :data:`GROUP_BYTES` bytes of inputs (and as many of output gradients), so the copy that lays
them end to end stays small beside the activations; ``GROUP_BYTES = 0`` runs layer by layer (the reference the
benchmark measures beside it), which is also the CPU's default (:func:`groups`). The formulas are the ones of Bu et al. (the ghost norm ``sum((a a^T) * (g g^T))``
when ``2 T^2 <= d p``, else the per-example gradient's norm) and do not depend on how layers are grouped: grouped
and layer by layer agree to float rounding (tests/trainers/test_bk_clipping.py).
"""

from __future__ import annotations

import torch
from torch import nn

GROUP_BYTES = 1 << 28  # per group: at most 256 MiB of inputs laid end to end (and as many of output gradients)
LAYER_BYTES = 1 << 25  # a layer whose input or output gradient is larger runs alone: its kernels keep the GPU busy
# long enough that their launches cost nothing, and the copy would cost time (on an H200, SmolLM2-135M at batch
# 128 x 128, 38-100 MB a layer: 1.29x non-private grouped, 1.15x layer by layer; at batch 16 x 128, 5-13 MB a
# layer: 1.27-1.51x grouped, 2.29-2.31x layer by layer; reports/bench/gpu.md)


def is_conv1d(m: nn.Module) -> bool:
    return type(m).__name__ == "Conv1D" and hasattr(m, "nf")


def is_rms(m: nn.Module) -> bool:
    return isinstance(m, getattr(nn, "RMSNorm", ())) or (type(m).__name__.endswith("RMSNorm")
                                                          and isinstance(getattr(m, "weight", None), nn.Parameter))


def kind(m: nn.Module) -> str | None:
    """The formula a layer's parameters take, or None for a layer book-keeping cannot clip."""
    if isinstance(m, nn.Linear):
        return "linear"
    if is_conv1d(m):
        return "conv1d"
    if isinstance(m, nn.Embedding):
        return None if (m.max_norm is not None or m.scale_grad_by_freq or m.sparse) else "embedding"
    if isinstance(m, nn.LayerNorm):
        return "layernorm" if len(m.normalized_shape) == 1 else None
    if is_rms(m):
        return "rmsnorm"
    return None


def _flat(x: torch.Tensor) -> torch.Tensor:
    """(B, ..., d) -> (B, T, d), T the product of the middle dimensions (1 for a (B, d) input)."""
    return x.reshape(x.size(0), -1, x.size(-1))


def _eps(m: nn.Module) -> float | None:
    if isinstance(m, nn.LayerNorm):
        return m.eps
    return getattr(m, "variance_epsilon", None) or getattr(m, "eps", None)


def _normalised(m: nn.Module, a: torch.Tensor) -> torch.Tensor:
    """What a norm layer multiplies its weight by, in float32."""
    x = a.float()
    if isinstance(m, nn.LayerNorm):
        mu = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)
        return (x - mu) * torch.rsqrt(var + m.eps)
    eps = _eps(m) or torch.finfo(x.dtype).eps
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _weight_norm2(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Per-example ||g_i^T a_i||_F^2 for a: (B, T, d), g: (B, T, p)."""
    T, d, p = a.size(1), a.size(2), g.size(2)
    if 2 * T * T <= d * p:  # the ghost norm: never forms the (p, d) gradient
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))
    return torch.einsum("btp,btd->bpd", g, a).pow(2).sum((1, 2))


def _trainable(m: nn.Module, name: str) -> nn.Parameter | None:
    p = getattr(m, name, None)
    return p if isinstance(p, nn.Parameter) and p.requires_grad else None


class Group:
    """Layers of one kind and one shape, their inputs and output gradients laid end to end: ``a`` (L * B, ...),
    ``g`` (L * B, ...). The per-layer tensors are dropped as they are laid out (no second copy survives)."""

    __slots__ = ("modules", "kind", "a", "g", "B")

    def __init__(self, records: list) -> None:
        self.modules = [r.module for r in records]
        self.kind, self.B = records[0].kind, records[0].a.size(0)
        if len(records) == 1:
            self.a, self.g = records[0].a, records[0].g
        else:
            self.a = torch.cat([r.a for r in records])
            self.g = torch.cat([r.g for r in records])
        for r in records:
            r.a = r.g = None

    @property
    def L(self) -> int:
        return len(self.modules)

    def norm2(self) -> list[tuple[list[nn.Parameter], torch.Tensor]]:
        """(the group's parameters of one role, weight or bias, in layer order; their per-example squared norms
        as an (L, B) table) for each trainable role."""
        m, g, L, B = self.modules[0], self.g.float(), self.L, self.B
        out: list[tuple[str, torch.Tensor]] = []
        if self.kind in ("linear", "conv1d"):
            a, g = _flat(self.a.float()), _flat(g)
            if _trainable(m, "weight") is not None:
                out.append(("weight", _weight_norm2(a, g)))
        elif self.kind == "embedding":
            ids, g = self.a.reshape(self.a.size(0), -1), _flat(g)
            if m.padding_idx is not None:  # torch never updates the padding row
                g = g * (ids != m.padding_idx).unsqueeze(-1)
            same = (ids.unsqueeze(2) == ids.unsqueeze(1)).float()
            out.append(("weight", (same * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))))
        else:  # layernorm, rmsnorm
            xh, g = _flat(_normalised(m, self.a)), _flat(g)
            if _trainable(m, "weight") is not None:
                out.append(("weight", (g * xh).sum(1).pow(2).sum(1)))
        if _trainable(m, "bias") is not None and self.kind != "embedding":
            out.append(("bias", g.sum(1).pow(2).sum(1)))
        return [([getattr(x, role) for x in self.modules], n2.view(L, B)) for role, n2 in out]

    def clipped_sum(self, c: torch.Tensor) -> None:
        """Add sum_i c_i grad_i of every layer of the group to its parameters' ``.grad``."""
        m, L, B = self.modules[0], self.L, self.B
        cv = c.repeat(L).view(-1, 1, 1)
        if self.kind in ("linear", "conv1d"):
            a, g = _flat(self.a.float()), _flat(self.g.float())
            T = a.size(1)
            if _trainable(m, "weight") is not None:  # c_i scales the narrower of a_i and g_i (an LM head: a)
                a_c, g_c = (a * cv, g) if a.size(-1) <= g.size(-1) else (a, g * cv)
                a_c, g_c = a_c.reshape(L, B * T, -1), g_c.reshape(L, B * T, -1)
                w = (torch.bmm(g_c.transpose(1, 2), a_c) if self.kind == "linear"  # (L, p, d), nn.Linear's layout
                     else torch.bmm(a_c.transpose(1, 2), g_c))  # (L, d, p), GPT-2's Conv1D
                for x, wl in zip(self.modules, w):
                    _add_grad(x.weight, wl)
            if _trainable(m, "bias") is not None:
                bias = torch.einsum("b,lbtp->lp", c, g.reshape(L, B, T, -1))
                for x, bl in zip(self.modules, bias):
                    _add_grad(x.bias, bl)
            return
        gc = _flat(self.g.float()) * cv  # each example's output gradient times its clip factor
        if self.kind == "embedding":
            for i, x in enumerate(self.modules):
                ids = self.a[i * B:(i + 1) * B].reshape(-1)
                rows = gc[i * B:(i + 1) * B].reshape(-1, gc.size(-1))
                if x.padding_idx is not None:
                    rows = rows * (ids != x.padding_idx).unsqueeze(-1)
                _add_grad(x.weight, torch.zeros_like(x.weight, dtype=torch.float32).index_add_(0, ids, rows))
            return
        xh = _flat(_normalised(m, self.a))
        gc = gc.reshape(L, -1, gc.size(-1))
        if _trainable(m, "weight") is not None:
            for x, wl in zip(self.modules, (gc * xh.reshape(L, -1, xh.size(-1))).sum(1)):
                _add_grad(x.weight, wl)
        if _trainable(m, "bias") is not None:
            for x, bl in zip(self.modules, gc.sum(1)):
                _add_grad(x.bias, bl)


def _key(r) -> tuple:
    """Records with equal keys take one batched call: same formula, shapes, dtypes, device, trainable roles and
    the attributes the formulas read (padding row, norm type and epsilon)."""
    m = r.module
    key = (r.kind, tuple(r.a.shape), tuple(r.g.shape), r.a.dtype, r.g.dtype, r.a.device,
           _trainable(m, "weight") is not None, _trainable(m, "bias") is not None)
    if r.kind == "embedding":
        return key + (id(m),)  # index_add into each table: one layer per group
    if r.kind in ("layernorm", "rmsnorm"):
        return key + (type(m), _eps(m))
    return key


def groups(records: list, limit: int | None = None) -> list[Group]:
    """The records in groups of one key, each at most ``limit`` bytes of inputs (a layer over :data:`LAYER_BYTES`
    alone), in the order their first layer ran (the layers alone last). ``limit`` None: :data:`GROUP_BYTES` on a GPU, one layer per group on the CPU (no launch to save there, and
    the copy costs time and memory: GPT-2-small at batch 4 x 64 on 2 cores, 1.14x non-private grouped against 1.04x
    layer by layer, reports/bench/gpu.md); 0: one layer per group."""
    if limit is None:
        limit = GROUP_BYTES if records and records[0].a.device.type == "cuda" else 0
    by_key: dict[tuple, list[list]] = {}
    alone: list[list] = []  # layers over LAYER_BYTES, one group each
    for r in records:
        chunks = by_key.setdefault(_key(r), [[]])
        size = max(r.a.numel() * r.a.element_size(), r.g.numel() * r.g.element_size())
        if size > LAYER_BYTES:
            alone.append([r])
            continue
        if chunks[-1] and (limit <= 0 or (len(chunks[-1]) + 1) * size > limit):
            chunks.append([])
        chunks[-1].append(r)
    return [Group(chunk) for chunks in [*by_key.values(), alone] for chunk in chunks if chunk]


def _add_grad(p: nn.Parameter, g: torch.Tensor) -> None:
    g = g.to(p.dtype).reshape(p.shape)
    p.grad = g if p.grad is None else p.grad + g
