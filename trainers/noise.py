"""The noise axis of the engine: what is added to the clipped sum of a logical batch.

A noise is any object with ``sample(reference, generator, secure_mode) -> Tensor`` (same shape, device and
dtype as ``reference``, the clipped sum of one parameter). :func:`install` puts it on an Opacus
``DPOptimizer`` (record- or user-level, :mod:`.mechanism`), replacing only the draw: clipping, the
division by the expected batch size, white-box canaries (which wrap ``add_noise``) and the step stay
Opacus'. ``None`` keeps Opacus' own Gaussian path untouched (sigma * C per coordinate), which is what the
Gaussian methods use; the Laplace-mixture noise of LMO-DP plugs in here (docs/architecture.md).
"""

from __future__ import annotations

from typing import Protocol

import torch


class Noise(Protocol):
    def sample(self, reference: torch.Tensor, generator: torch.Generator | None, secure_mode: bool) -> torch.Tensor:
        ...


class Gaussian:
    """Gaussian noise of standard deviation ``std`` (= sigma * C) drawn by Opacus' own generator function
    (including its secure-mode construction), for methods that want it explicitly."""

    def __init__(self, std: float):
        self.std = float(std)

    def sample(self, reference, generator, secure_mode):
        from dpaudit import opacus_private as op

        return op.generate_noise(std=self.std, reference=reference, generator=generator, secure_mode=secure_mode)


def install(optimizer, noise: Noise | None, only_rank0: bool = False) -> None:
    """Make ``optimizer.add_noise`` draw from ``noise`` (no-op for None: Opacus' Gaussian path). A noise with a
    ``new_step()`` hears of every logical step first (LMO-DP's per-step scale). ``only_rank0``: under torchrun
    (trainers/distributed.py) the other ranks pass their clipped sum on unchanged, so the noise is added once."""
    if noise is None:
        return
    from dpaudit import opacus_private as op

    def add_noise():
        if hasattr(noise, "new_step"):
            noise.new_step()
        draw = not only_rank0 or getattr(optimizer, "rank", 0) == 0
        for p in optimizer.params:
            op.check_processed(p.summed_grad)
            if draw:
                p.grad = (p.summed_grad + noise.sample(p.summed_grad, optimizer.generator,
                                                       optimizer.secure_mode)).view_as(p)
            else:
                p.grad = p.summed_grad.view_as(p)
            op.mark_processed(p.summed_grad)

    optimizer.add_noise = add_noise


BLOCK = 1 << 20  # coordinates per block of the block-wise draw: each block has a seed of its own
PARALLEL_MIN = 1 << 22  # a CPU step with at least this many coordinates is drawn block-wise, on every torch thread


def add_gaussian_(tensors: list, std: float, generator: torch.Generator | None) -> None:
    """Add N(0, std^2) to every coordinate of ``tensors`` in place (book-keeping's noise, trainers/bk_clipping.py).

    torch draws a normal tensor on one CPU thread per generator (a serial Mersenne twister): 0.7 s of a
    163M-parameter DP step on the project's 2-core CPU, the other core idle. From ``PARALLEL_MIN`` CPU coordinates
    up, every tensor is cut into blocks of ``BLOCK`` coordinates (the last one shorter), one 62-bit seed per block is
    drawn from ``generator`` first, in order, and each block is drawn by a generator of its own seeded with it, the
    blocks shared out among the torch threads. The values depend on the seed and the shapes only, never on the
    number of threads or which thread drew which block (a seeded run reproduces on any machine); the distribution is
    one draw's, the values are not Opacus'. Below the threshold, on a GPU (whose draw is parallel already) or for a
    non-contiguous tensor, each tensor gets ``normal_`` from ``generator`` itself, in order: Opacus' own values."""
    import threading

    total = sum(t.numel() for t in tensors)
    if total < PARALLEL_MIN or any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        for t in tensors:
            t.add_(torch.empty_like(t).normal_(0.0, std, generator=generator))
        return
    blocks = [(t.view(-1), a) for t in tensors for a in range(0, t.numel(), BLOCK)]
    seeds = torch.randint(0, 2 ** 62, (len(blocks),), generator=generator).tolist()
    next_block, lock, errors = iter(range(len(blocks))), threading.Lock(), []

    def work() -> None:
        try:
            buffers = {}  # one per dtype, reused: no fresh pages for every block
            while True:
                with lock:
                    i = next(next_block, None)
                if i is None:
                    return
                flat, a = blocks[i]
                part = flat[a:a + BLOCK]
                buf = buffers.setdefault(part.dtype, torch.empty(BLOCK, dtype=part.dtype))[:part.numel()]
                part.add_(buf.normal_(0.0, std, generator=torch.Generator().manual_seed(int(seeds[i]))))
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)

    workers = [threading.Thread(target=work) for _ in range(1, min(torch.get_num_threads(), len(blocks)))]
    for w in workers:
        w.start()
    work()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


class LaplaceMixture:
    """LMO-DP's noise (Yang et al., Def. 4.1; docs/methods.md): Laplace(0, 1 / Y) on every coordinate, Y drawn from
    ``noise`` (:class:`dpaudit.accounting.lmo_noise.LmoNoise`) once per call (``draw = "per_step"``: one Y
    for every coordinate of every parameter in the step) or once per coordinate (``"per_coordinate"``).

    Every draw uses the optimizer's generator on the parameters' device (Opacus' secure generator in secure
    mode), so a CPU test runs the same code as a CUDA run.
    """

    def __init__(self, noise, draw: str = "per_coordinate"):
        from dpaudit.options import LMO_DRAWS

        if draw not in LMO_DRAWS:
            raise ValueError(f"draw must be one of {LMO_DRAWS}")
        self.noise, self.draw = noise, draw
        self._step_y = None  # per_step: the Y of the current step, shared by all parameters

    def new_step(self) -> None:
        self._step_y = None

    def sample(self, reference, generator, secure_mode):
        dev, dt = reference.device, reference.dtype
        if self.draw == "per_step":
            if self._step_y is None:
                self._step_y = sample_inverse_scale(self.noise, (1,), generator, dev)
            y = self._step_y
        else:
            y = sample_inverse_scale(self.noise, reference.shape, generator, dev)
        return (laplace(reference.shape, generator, dev) / y).to(dt)


def _uniform(shape, generator, device) -> torch.Tensor:
    """U(0, 1), strictly inside (0, 1), float64."""
    u = torch.rand(shape, generator=generator, device=device, dtype=torch.float64)
    return u.clamp_(min=1e-300, max=1 - 1e-16)


def laplace(shape, generator, device) -> torch.Tensor:
    """Standard Laplace (scale 1): the difference of two Exp(1)."""
    return -torch.log(_uniform(shape, generator, device)) + torch.log(_uniform(shape, generator, device))


def standard_gamma(k: float, shape, generator, device) -> torch.Tensor:
    """Gamma(k, 1) by Marsaglia & Tsang (2000), vectorised rejection on ``device`` with ``generator``
    (torch's own Gamma sampler takes no generator); k < 1 through Gamma(k + 1) * U^(1/k)."""
    boost = k < 1
    kk = k + 1 if boost else k
    d = kk - 1.0 / 3
    c = 1.0 / (9 * d) ** 0.5
    out = torch.empty(shape, device=device, dtype=torch.float64)
    todo = torch.ones(shape, device=device, dtype=torch.bool)
    while bool(todo.any()):
        n = int(todo.sum())
        x = torch.randn(n, generator=generator, device=device, dtype=torch.float64)
        v = (1 + c * x) ** 3
        u = _uniform((n,), generator, device)
        ok = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * torch.log(v.clamp(min=1e-300)))
        idx = todo.nonzero(as_tuple=True)
        sel = tuple(i[ok] for i in idx)
        out[sel] = (d * v)[ok]
        todo[sel] = False
    if boost:
        out = out * _uniform(shape, generator, device) ** (1.0 / k)
    return out


def sample_inverse_scale(noise, shape, generator, device) -> torch.Tensor:
    """Y of :class:`LmoNoise` (sum of the weighted parts, or one part picked with probability a_k), float64."""
    parts = []
    for name, w in zip(("gamma", "exp", "uniform"), noise.weights):
        if w == 0:
            parts.append(None)
            continue
        if name == "gamma":
            x = standard_gamma(noise.gamma_k, shape, generator, device) * noise.gamma_theta
        elif name == "exp":
            x = -torch.log(_uniform(shape, generator, device)) / noise.exp_rate
        else:
            x = noise.u_low + (noise.u_high - noise.u_low) * _uniform(shape, generator, device)
        parts.append(x)
    if noise.form == "sum":
        return sum(w * x for w, x in zip(noise.weights, parts) if x is not None)
    pick = _uniform(shape, generator, device)
    y = torch.zeros(shape, device=device, dtype=torch.float64)
    lo = 0.0
    for w, x in zip(noise.weights, parts):
        if x is None:
            continue
        mask = (pick >= lo) & (pick < lo + w)
        y = torch.where(mask, x, y)
        lo += w
    return torch.where(pick >= lo, next(x for x in reversed(parts) if x is not None), y)  # float rounding at 1
