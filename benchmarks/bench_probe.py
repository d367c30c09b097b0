"""Step time of an Opacus loop with dpaudit's probe against the same loop without it, measured in one run.

    python benchmarks/bench_probe.py [--m 1000] [--steps 60] [--batch 64] [--width 64] [--mode hooks]

The example's tiny GPT-2 (2 layers, sequences of 24 tokens) under Opacus (hooks or ghost clipping, sigma 1, C 1),
two copies built from the same seed: one plain, one with ``attach_probe(optimizer, m=M, model=model,
dataset_size=N)`` (canaries on the block, 32 clip canaries, every tensor's noise read, coverage of the model and
the online checks). ``--mode`` picks the adapter: Opacus ``hooks`` or ``ghost``, ``non-wrapping``
(``make_private(..., wrap_model=False)``), ``accelerate`` (non-wrapping mode, then ``Accelerator.prepare``; the probe
on the optimizer it returns), ``functional`` (a hand-written DP-SGD step with ``torch.func`` per-sample gradients,
the plain copy without and the other with ``functional_probe``'s two calls) or ``fsdp`` (a tiny Llama of the same
width under dpaudit's ghost_fsdp path, FSDP2 and Opacus' FSDP optimizer, on 2 gloo ranks: rank 0's step times, the
probe's collectives included) or ``ddp`` (the same GPT-2 in Opacus' DPDDP with its DistributedDPOptimizer on
2 gloo ranks). Steps of the two alternate, so that drift of the machine's speed hits both alike;
the median of
``--steps`` timed steps each after 5 warm-up steps; the ratio is probe / plain. Writes one markdown line per
setting to stdout (reports/bench/probe.md holds this project's numbers).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit import api


def setup(args, probe: bool):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=512, n_positions=32, n_embd=args.width, n_layer=2, n_head=2,
                     tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager" if args.mode == "functional" else None)
    data = TensorDataset(torch.randint(0, 512, (10 * args.batch, 24)))
    if args.mode == "functional":
        return Functional(model, args, probe), None, None
    engine = PrivacyEngine(accountant="prv")
    kw = dict(module=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
              data_loader=DataLoader(data, batch_size=args.batch), noise_multiplier=1.0, max_grad_norm=1.0)
    if args.mode == "ghost":
        model, opt, crit, _ = engine.make_private(**kw, grad_sample_mode="ghost",
                                                  criterion=torch.nn.CrossEntropyLoss(reduction="mean"))
    elif args.mode in ("non-wrapping", "accelerate"):
        _, opt, loader = engine.make_private(**kw, wrap_model=False)  # the model stays the user's own
        crit = None
        if args.mode == "accelerate":
            from accelerate import Accelerator

            model, opt, _ = Accelerator(cpu=True).prepare(model, opt, loader)
    else:
        model, opt, _ = engine.make_private(**kw)
        crit = None
    if probe:
        # every check on: per-tensor noise meter, coverage of the model, online e-processes (sampling with N)
        api.attach_probe(opt, sample_rate=0.1, m=args.m, seed=0, model=model, dataset_size=len(data),
                         on_fail=None)  # this loop's fixed-size batches are not Poisson: recorded, not warned
    return model, opt, crit


class Functional:
    """A hand-written DP-SGD step: torch.func per-sample gradients, clipping to C = 1, sum, N(0, 1) noise, / B, Adam;
    with ``functional_probe``'s add_canaries before the noise and observe after it when ``probe``."""

    def __init__(self, model, args, probe: bool):
        from torch.func import functional_call, grad, vmap

        self.model, self.B = model, float(args.batch)
        self.opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        self.gen = torch.Generator().manual_seed(2)
        self.probe = api.functional_probe({n: p.shape for n, p in model.named_parameters()}, sample_rate=0.1,
                                          clipping_norm=1.0, noise_multiplier=1.0, expected_batch_size=self.B,
                                          m=args.m, seed=0, dataset_size=10 * args.batch, on_fail=None) \
            if probe else None

        def loss(params, ids):
            ids = ids.unsqueeze(0)
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            ones = torch.ones(ids.shape, dtype=torch.long)
            logits = functional_call(model, params, (ids,), {"attention_mask": ones, "position_ids": pos}).logits
            return F.cross_entropy(logits[0, :-1], ids[0, 1:])

        self.per_sample = vmap(grad(loss), in_dims=(None, 0))

    def __call__(self, ids) -> None:
        params = {n: p.detach() for n, p in self.model.named_parameters()}
        g = self.per_sample(params, ids)
        b = ids.shape[0]
        norms = torch.stack([v.reshape(b, -1).norm(dim=1) for v in g.values()]).norm(dim=0)
        factor = (1.0 / (norms + 1e-6)).clamp(max=1.0)
        total = {n: torch.einsum("i,i...->...", factor, v) for n, v in g.items()}
        if self.probe is not None:
            total = self.probe.add_canaries(total, records=b)
        update = {n: (v + torch.normal(0.0, 1.0, v.shape, generator=self.gen)) / self.B for n, v in total.items()}
        if self.probe is not None:
            self.probe.observe(update)
        for n, p in self.model.named_parameters():
            p.grad = update[n]
        self.opt.step()


def step(model, opt, crit, ids) -> float:
    t0 = time.perf_counter()
    if isinstance(model, Functional):
        model(ids)
        return time.perf_counter() - t0
    opt.zero_grad()
    pos = torch.arange(ids.shape[1]).expand_as(ids).contiguous()
    logits = model(input_ids=ids, position_ids=pos).logits[:, :-1]
    if crit is None:
        F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(1).mean().backward()
    else:  # ghost clipping: Opacus' criterion wraps the loss (one value per sequence)
        crit(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), shape=ids[:, 1:].shape).backward()
    opt.step()
    return time.perf_counter() - t0


def fsdp_worker(rank, world, port, args, out):
    """One of the ranks of ``--mode fsdp``: two copies of a tiny Llama sharded by dpaudit's ghost_fsdp path
    (trainers/fsdp.py: FSDP2 and Opacus' FSDP optimizer), one with the probe on every rank; steps alternate;
    rank 0 writes its step times."""
    import json
    import os

    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.trainers import fsdp
    from dpaudit.trainers.units import RecordStep

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    n, q = 10 * args.batch, 0.1
    ids = torch.randint(2, 512, (n, 24), generator=torch.Generator().manual_seed(0))
    data = TensorDataset(ids, torch.ones_like(ids), ids.clone())
    runs = {}
    for name in ("plain", "probe"):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=args.width, intermediate_size=2 * args.width,
                                             num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                             max_position_embeddings=32, tie_word_embeddings=False, bos_token_id=0,
                                             eos_token_id=1, pad_token_id=1))
        module, opt, crit, loader, _ = fsdp.record_level(model, torch.optim.Adam(model.parameters(), lr=1e-3), data,
                                                         sigma=1.0, clipping_norm=1.0, expected_batch_size=int(q * n),
                                                         sample_rate=q, seed=0)
        if name == "probe":
            api.attach_probe(opt, sample_rate=q, m=args.m, seed=0, model=module, dataset_size=n, on_fail=None)
        batches = (b for _ in range(10 ** 6) for b in loader)
        runs[name] = (opt, RecordStep(module, crit, None, placeholder=fsdp.placeholder(data)), batches)
    times = {"plain": [], "probe": []}
    for i in range(5 + args.steps):
        order = ("plain", "probe") if i % 2 == 0 else ("probe", "plain")
        for name in order:
            opt, step_fn, batches = runs[name]
            batch = next(batches)
            torch.distributed.barrier()
            t0 = time.perf_counter()
            opt.zero_grad()
            step_fn(batch)
            opt.step()
            if i >= 5:
                times[name].append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(times, fh)
    torch.distributed.destroy_process_group()


def ddp_worker(rank, world, port, args, out):
    """One of the ranks of ``--mode ddp``: two copies of the tiny GPT-2 in Opacus' DPDDP with its
    DistributedDPOptimizer (hooks; Poisson batches split over the ranks), one with the probe on every rank; steps
    alternate; rank 0 writes its step times."""
    import json
    import os

    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randint(0, 512, (10 * args.batch, 24), generator=torch.Generator().manual_seed(0)))
    runs = {}
    for name in ("plain", "probe"):
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=512, n_positions=32, n_embd=args.width, n_layer=2, n_head=2,
                         tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = DPDDP(GPT2LMHeadModel(cfg))
        torch.manual_seed(1000 + rank)
        model, opt, loader = PrivacyEngine(accountant="prv").make_private(
            module=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-3),
            data_loader=DataLoader(data, batch_size=args.batch), noise_multiplier=1.0, max_grad_norm=1.0)
        if name == "probe":
            api.attach_probe(opt, sample_rate=loader.sample_rate, m=args.m, seed=0, model=model,
                             dataset_size=len(data), on_fail=None)
        runs[name] = (model, opt, (b for _ in range(10 ** 6) for b in loader))
    times = {"plain": [], "probe": []}
    for i in range(5 + args.steps):
        for name in (("plain", "probe") if i % 2 == 0 else ("probe", "plain")):
            model, opt, batches = runs[name]
            (ids,) = next(batches)
            torch.distributed.barrier()
            t = step(model, opt, None, ids) if len(ids) else None
            if t is None:  # an empty local batch: the collectives still run
                t0 = time.perf_counter()
                opt.zero_grad()
                (model(input_ids=torch.zeros(1, 24, dtype=torch.long)).logits.sum() * 0).backward()
                opt.step()
                t = time.perf_counter() - t0
            if i >= 5:
                times[name].append(t)
    if rank == 0:
        with open(out, "w") as fh:
            json.dump(times, fh)
    torch.distributed.destroy_process_group()


def run_ranks(args, worker=None) -> dict:
    """The two-rank modes: spawn the worker (default: FSDP) on 2 gloo ranks, return rank 0's step times."""
    import json
    import socket
    import tempfile

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/times.json"
        torch.multiprocessing.spawn(worker or fsdp_worker, args=(2, port, args, out), nprocs=2, join=True)
        with open(out) as fh:
            return json.load(fh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=1000, help="Probe canaries.")
    ap.add_argument("--steps", type=int, default=60, help="Timed steps of each loop.")
    ap.add_argument("--batch", type=int, default=64, help="Records per batch.")
    ap.add_argument("--width", type=int, default=64, help="Embedding width of the tiny GPT-2.")
    ap.add_argument("--mode", default="hooks",
                    choices=("hooks", "ghost", "non-wrapping", "accelerate", "functional", "fsdp", "ddp"),
                    help="The adapter: Opacus' hooks or ghost mode, non-wrapping mode, accelerate, the functional "
                         "probe on a hand-written step, or fsdp (a tiny Llama of the same width under dpaudit's "
                         "ghost_fsdp path on 2 gloo ranks, one thread each; rank 0's step times), or ddp (the tiny "
                         "GPT-2 in Opacus' DPDDP on 2 gloo ranks, the same way).")
    args = ap.parse_args()
    if args.mode == "ddp":
        times = run_ranks(args, ddp_worker)
        a, b = statistics.median(times["plain"]), statistics.median(times["probe"])
        print(f"| ddp | tiny GPT-2 (width {args.width}, 2 layers, 24 tokens), 2 gloo ranks | B = {args.batch} "
              f"| m = {args.m} | {a * 1000:.1f} ms | {b * 1000:.1f} ms | {b / a:.3f} | "
              f"{platform.processor() or platform.machine()}, 1 thread per rank |")
        return
    if args.mode == "fsdp":
        times = run_ranks(args)
        a, b = statistics.median(times["plain"]), statistics.median(times["probe"])
        print(f"| fsdp | tiny Llama (width {args.width}, 2 layers, 24 tokens), 2 gloo ranks | B = {args.batch} "
              f"| m = {args.m} | {a * 1000:.1f} ms | {b * 1000:.1f} ms | {b / a:.3f} | "
              f"{platform.processor() or platform.machine()}, 1 thread per rank |")
        return
    plain, probed = setup(args, False), setup(args, True)
    g = torch.Generator().manual_seed(1)
    times = {"plain": [], "probe": []}
    for i in range(5 + args.steps):
        ids = torch.randint(0, 512, (args.batch, 24), generator=g)
        pair = [("plain", plain), ("probe", probed)] if i % 2 == 0 else [("probe", probed), ("plain", plain)]
        for name, (model, opt, crit) in pair:
            t = step(model, opt, crit, ids)
            if i >= 5:
                times[name].append(t)
    a, b = statistics.median(times["plain"]), statistics.median(times["probe"])
    print(f"| {args.mode} | tiny GPT-2 (width {args.width}, 2 layers, 24 tokens) | B = {args.batch} | m = {args.m} | "
          f"{a * 1000:.1f} ms | {b * 1000:.1f} ms | {b / a:.3f} | {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads |")


if __name__ == "__main__":
    main()
