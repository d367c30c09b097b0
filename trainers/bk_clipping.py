"""Book-keeping ghost clipping (Bu et al., "Differentially private optimization on large model at small cost",
ICML 2023): per-example gradient norms and the clipped gradient sum from ONE backward pass.

Opacus' ghost clipping (``grad_sample_mode = "ghost"``) runs two backward passes: one for the per-example norms,
one more of the loss reweighted by the clip factors. Book-keeping keeps what the single backward already has
instead: for every trainable layer, its input ``a`` (saved in the forward) and the gradient of the loss at its
output ``g`` (caught in the backward). From them

* the per-example norm of the layer's weight gradient ``g_i^T a_i`` (sequence of T positions) is read without
  forming it: ``sum((a_i a_i^T) * (g_i g_i^T))`` (the ghost norm, T^2 (d + p) work) when ``2 T^2 <= d p``,
  else from the per-example gradient itself;
* once every layer's norms are summed and the clip factors ``c_i = min(1, C / (norm_i + 1e-6))`` (Opacus') are
  known, the clipped sum ``sum_i c_i g_i^T a_i = (c * g)^T a`` is one product per layer, the cost of the weight
  gradient that the backward did not compute: the trainable weights are taken out of autograd during the
  forward (``requires_grad`` off while it runs, restored at once), so autograd computes activation gradients
  only.

The formulas live in :mod:`.bk_layers`, which on a GPU runs them once for every group of layers of one shape
(a dozen kernels a layer otherwise: at batch 16 x 128 the launches, not the arithmetic, were the cost).

Supported layers (whatever holds a trainable parameter must be one): ``nn.Linear``, ``nn.Embedding``,
``nn.LayerNorm`` over the last dimension, RMS norms (``nn.RMSNorm`` and Hugging Face's ``*RMSNorm``:
``weight * x / rms(x)``), GPT-2's ``Conv1D``. :func:`unsupported` names the first other one, and the mechanism
then falls back to Opacus' ghost clipping in one line. A parameter shared by two layers (tied embeddings) or a
layer run twice in one forward is refused, as Opacus' ghost clipping refuses it.

The optimizer, Poisson loader, noise and white-box canaries are Opacus' ghost-clipping ones
(``DPOptimizerFastGradientClipping`` reads the clipped sum from ``p.grad``): only where the clipped sum comes
from differs, and, from 2^22 CPU coordinates up, which generator draws which noise (block-wise, on every torch
thread: :func:`dpaudit.trainers.noise.add_gaussian_`). Checked against a for-loop reference and Opacus' ghost
mode in tests/trainers/test_bk_clipping.py.

(Over 300 lines on purpose: the per-layer norm and clipped-sum formulas, their hooks and the optimizer that
consumes them must change together; tests/trainers/test_bk_clipping.py checks them against Opacus as one unit.)
"""

from __future__ import annotations

import collections

import torch
from opacus.optimizers import DPOptimizerFastGradientClipping
from torch import nn

from dpaudit import opacus_private as op
from dpaudit.errors import DpauditError
from dpaudit.trainers import bk_layers, noise


def _owners(model: nn.Module) -> tuple[list[tuple[str, nn.Module]], str | None]:
    """(the layers holding trainable parameters, the first reason book-keeping cannot clip this model or None)."""
    seen: dict[int, str] = {}
    layers = []
    for name, m in model.named_modules():
        own = [(n, p) for n, p in m.named_parameters(recurse=False) if p.requires_grad]
        if not own:
            continue
        for n, p in own:
            where = f"{name}.{n}" if name else n
            if id(p) in seen:
                return [], f"{where} shares its weights with {seen[id(p)]}"
            seen[id(p)] = where
        if bk_layers.kind(m) is None:
            return [], f"layer {name or '(root)'} ({type(m).__name__}) holds trainable parameters"
        layers.append((name, m))
    return layers, None


def unsupported(model: nn.Module) -> str | None:
    """Why book-keeping clipping cannot handle ``model``'s trainable layers (None when it can)."""
    return _owners(model)[1]


class _Record:
    __slots__ = ("module", "kind", "a", "g")

    def __init__(self, module, kind, a):
        self.module, self.kind, self.a, self.g = module, kind, a, None


class BookKeeping(nn.Module):
    """``model`` with book-keeping hooks on its trainable layers. After :meth:`clipped_backward` of the per-example
    losses, every trainable ``p.grad`` holds the clipped sum and :attr:`per_sample_gradient_norms` the norms (read
    by :mod:`.clip_stats`). ``remove_hooks`` and ``_module`` as Opacus' wrappers have them (mechanism.release)."""

    def __init__(self, model: nn.Module, max_grad_norm: float, group_bytes: int | None = None):
        super().__init__()
        layers, why = _owners(model)
        if why is not None:
            raise DpauditError(f"book-keeping clipping cannot clip this model: {why}; use grad_sample_mode = 'ghost'")
        self._module = model
        self.max_grad_norm = float(max_grad_norm)
        self.group_bytes = group_bytes  # trainers/bk_layers.groups: None its default, 0 layer by layer
        self._layers = layers
        self._params = [p for _, m in layers for p in m.parameters(recurse=False) if p.requires_grad]
        self._records: dict[int, _Record] = {}
        self._norms: torch.Tensor | None = None
        self._handles = [m.register_forward_hook(self._forward_hook) for _, m in layers]

    # -- the forward: inputs kept, weights out of autograd -----------------------------------------------------

    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled():
            return self._module(*args, **kwargs)
        self._records = {}
        for p in self._params:
            p.requires_grad_(False)
        try:
            return self._module(*args, **kwargs)
        finally:
            for p in self._params:
                p.requires_grad_(True)

    def _forward_hook(self, module, inputs, output):
        if not torch.is_grad_enabled():
            return None
        if id(module) in self._records:
            raise DpauditError(f"book-keeping clipping: layer {type(module).__name__} ran twice in one forward (its "
                               "per-example gradient is a sum over the calls); use grad_sample_mode = 'ghost' or 'hooks'")
        kind = bk_layers.kind(module)
        rec = _Record(module, kind, inputs[0].detach())
        self._records[id(module)] = rec
        if not output.requires_grad:  # nothing below needs a gradient: this output starts the backward
            output = output.detach().requires_grad_(True)

        def catch(grad):
            rec.g = grad.detach()

        output.register_hook(catch)
        return output

    # -- the backward: one pass, then norms and the clipped sums -------------------------------------------------

    def clipped_backward(self, loss_per_sample: torch.Tensor, owner: torch.Tensor | None = None,
                         units: int | None = None, accumulate: bool = False) -> None:
        """One backward of sum_i loss_i, then p.grad = sum_u c_u grad(sum of unit u's losses) for every trainable
        parameter. Without ``owner`` each row is its own unit (record-level); with ``owner`` (row -> unit index
        in 0 .. units - 1) a unit's rows are clipped together (user-level DP: a user's gradient is the sum of its
        records' weighted gradients, read from the rows laid end to end, never as per-record gradients).
        ``accumulate``: add to the clipped sums and norms of the passes before (other units of the same step)."""
        B = loss_per_sample.size(0)
        with torch.profiler.record_function("bk.backward"):
            loss_per_sample.sum().backward()
        records = [r for r in self._records.values() if r.g is not None]
        for r in records:
            if r.a.size(0) != B or r.g.size(0) != B:
                raise DpauditError(f"book-keeping clipping: layer {type(r.module).__name__} saw a batch of "
                                   f"{r.a.size(0)} rows for {B} examples (a broadcast input such as shared position "
                                   "ids); pass per-example inputs or use grad_sample_mode = 'ghost'")
        if owner is not None:
            slot, width = _slots(owner, units)
            for r in records:
                ids = r.kind == "embedding"  # its input is (rows, T) positions, not (rows, d) features
                r.a = _grouped(r.a, owner, slot, units, width, ids or r.a.dim() > 2)
                r.g = _grouped(r.g, owner, slot, units, width, r.g.dim() > 2)
            B = units
        before = {id(p): p.grad for p in self._params} if accumulate else {}
        norms_before = self._norms if accumulate and self._norms is not None else None
        for p in self._params:  # this pass's clipped sum (Opacus accumulates physical batches itself)
            p.grad = None
        with torch.profiler.record_function("bk.norms"):
            per_param, norm2, found = self._norm2(bk_layers.groups(records, self.group_bytes), B,
                                                  loss_per_sample.device)
        norms = norm2.sqrt()
        c = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        self._records = {}
        records.clear()
        with torch.profiler.record_function("bk.clipped_sums"):
            while found:  # each group's tensors freed as soon as its clipped sums are in
                found.pop().clipped_sum(c)
        for p in self._params:
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            old = before.get(id(p))
            p.grad = g if old is None else old + g
            n = per_param[id(p)]  # per parameter, as Opacus' ghost hooks leave it (the probe reads it)
            old_n = op.norm_sample(p) if accumulate else None
            op.set_norm_sample(p, n if old_n is None else torch.cat([old_n, n]))
        self._norms = norms.detach() if norms_before is None else torch.cat([norms_before, norms.detach()])

    @property
    def per_sample_gradient_norms(self) -> torch.Tensor:
        if self._norms is None:
            raise ValueError("no backward has run")
        return self._norms

    @staticmethod
    def _norm2(found: list, B: int, device) -> tuple[dict, torch.Tensor, list]:
        """(parameter id -> per-example gradient norm, per-example squared norm summed over every layer, the
        groups). A parameter the batch never reached has norm 0 (and gradient 0)."""
        tables, owners = [], []
        for grp in found:
            for params, n2 in grp.norm2():
                tables.append(n2)
                owners.extend(params)
        if not tables:
            zero = torch.zeros(B, device=device, dtype=torch.float32)
            return collections.defaultdict(lambda: zero), zero.clone(), found
        n2 = torch.cat(tables)  # (parameters, B): one sum and one square root for all of them
        per_param = collections.defaultdict(lambda: torch.zeros(B, device=device, dtype=torch.float32))
        per_param.update(zip(map(id, owners), n2.sqrt()))
        return per_param, n2.sum(0), found

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        for p in self._params:
            p.requires_grad_(True)


def _slots(owner: torch.Tensor, units: int) -> tuple[torch.Tensor, int]:
    """(each row's place among its unit's rows, the most rows of any unit)."""
    counts = torch.bincount(owner, minlength=units)
    first = torch.cumsum(counts, 0) - counts  # rows are laid out unit by unit or not: rank by stable sort
    order = torch.argsort(owner, stable=True)
    slot = torch.empty_like(owner)
    slot[order] = torch.arange(owner.numel(), device=owner.device) - first[owner[order]]
    return slot, int(counts.max()) if owner.numel() else 0


def _grouped(x: torch.Tensor, owner: torch.Tensor, slot: torch.Tensor, units: int, width: int,
             seq: bool) -> torch.Tensor:
    """A unit's rows end to end: (rows, T, ...) -> (units, width * T, ...) when dimension 1 is positions
    (``seq``), else (rows, d) -> (units, width, d); zero rows (id 0) after a unit's last. Zero output gradients
    make the padding contribute nothing to a norm or a sum."""
    out = x.new_zeros((units, width, *x.shape[1:]))
    out[owner, slot] = x
    return out.reshape(units, width * x.size(1), *x.shape[2:]) if seq else out


class BKLoss:
    """The criterion of book-keeping clipping, with the interface of Opacus' ``DPLossFastGradientClipping``:
    ``crit(logits, targets, shape=(B, T))`` gives each example's mean token loss (positions at ``ignore_index``
    left out) wrapped so that ``.backward()`` is :meth:`BookKeeping.clipped_backward`."""

    def __init__(self, module: BookKeeping, ignore_index: int = -100):
        self.module, self.ignore_index = module, ignore_index

    def __call__(self, logits, targets, shape=None):
        loss = nn.functional.cross_entropy(logits, targets, ignore_index=self.ignore_index, reduction="none")
        if shape is not None and loss.size(0) == shape[0] * shape[1]:
            loss = loss.view(shape[0], shape[1])
            valid = (targets.view(shape[0], shape[1]) != self.ignore_index).sum(1).clamp(min=1)
            loss = loss.sum(1) / valid
        return BKTensor(self.module, loss)


class BKTensor:
    """Per-example losses whose ``backward`` is one book-keeping pass; ``detach``/``item`` give their mean."""

    def __init__(self, module: BookKeeping, loss_per_sample: torch.Tensor):
        self.module, self.loss_per_sample = module, loss_per_sample

    def detach(self) -> torch.Tensor:
        return self.loss_per_sample.mean().detach()

    def item(self) -> float:
        return float(self.detach())

    def backward(self) -> None:
        self.module.clipped_backward(self.loss_per_sample)


class BKOptimizer(DPOptimizerFastGradientClipping):
    """Opacus' ghost-clipping optimizer (noise sigma C on the clipped sum, divided by the expected batch), without
    its two copies of every gradient: book-keeping writes a fresh ``p.grad`` each backward that nothing else holds,
    so the first physical batch's becomes ``p.summed_grad`` as it is, and the noise is added in place. Below 2^22
    coordinates (and on a GPU, or in secure mode) the noise is Opacus' own draw in the same order from the same
    generator: the same update to the last bit; from 2^22 CPU coordinates up it is drawn block-wise on every torch
    thread, the blocks seeded from the same generator (:func:`dpaudit.trainers.noise.add_gaussian_`: the same
    distribution, values that depend on the seed alone). On a 163M-parameter model the copies cost 1.1 s and the
    one-thread draw 0.7 s of a DP optimizer step on the project's 2-core CPU (reports/bench/training.md)."""

    def accumulate(self):
        for p in self.params:
            if p.summed_grad is not None:
                p.summed_grad.add_(p.grad.data)
            else:
                p.summed_grad = p.grad.data

    def add_noise(self):
        std = getattr(self, "_adjusted_noise_multiplier", self.noise_multiplier) * self.max_grad_norm
        for p in self.params:
            op.check_processed(p.summed_grad)
        if self.secure_mode or not std > 0 or any(type(p.summed_grad) is not torch.Tensor for p in self.params):
            for p in self.params:
                p.summed_grad.add_(op.generate_noise(std=std, reference=p.summed_grad, generator=self.generator,
                                                     secure_mode=self.secure_mode))
        else:  # without the tensor of zeros Opacus' draw fills first (650 MB a step for a 163M-parameter model);
            # from 2^22 CPU coordinates up, block-wise on every torch thread (trainers/noise.py)
            noise.add_gaussian_([p.summed_grad for p in self.params], std, self.generator)
        for p in self.params:
            p.grad = p.summed_grad.view_as(p)
            op.mark_processed(p.summed_grad)

    def scale_grad(self):
        """Opacus' division by the expected batch (loss_reduction = "mean"), as one fused kernel for every
        parameter instead of one launch each (270 on SmolLM2-135M): the same quotients."""
        if self.loss_reduction == "mean":
            torch._foreach_div_([p.grad for p in self.params], float(self.expected_batch_size * self.accumulated_iterations))


def optimizer_like(ghost: DPOptimizerFastGradientClipping) -> BKOptimizer:
    """A :class:`BKOptimizer` over the same optimizer, noise, clipping norm, expected batch and generator."""
    return BKOptimizer(ghost.original_optimizer, noise_multiplier=ghost.noise_multiplier,
                       max_grad_norm=ghost.max_grad_norm, expected_batch_size=ghost.expected_batch_size,
                       loss_reduction=ghost.loss_reduction, generator=ghost.generator, secure_mode=ghost.secure_mode)
