"""Logical-step time of DP (Opacus hooks, noise once from rank 0) and non-private training at 1 and 2 ranks.

    python benchmarks/bench_distributed.py [--model tiny|smollm2] [--batch 64] [--seq 64] [--steps 8]
                                           [--ranks 1,2] [--repeats 3]

Each configuration spawns its ranks on gloo (the CPU stand-in for NCCL; set ``--backend nccl`` on GPUs) with
the machine's cores split evenly between them, so 1 and 2 ranks use the same hardware. A DP logical step is
one Poisson batch of expected size ``--batch`` over all ranks (trainers/distributed.py: each rank samples its
own shard), a non-private step a fixed batch of ``--batch`` split evenly (PyTorch DDP). One warm-up step, then
the median of ``--steps`` timed steps on rank 0; the configurations are interleaved ``--repeats`` times and the
medians reported. Printed ratios are against 1 rank of the same mode, and DP against non-private at the same
number of ranks, all measured in the same invocation.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(name: str):
    from dpaudit.tasks import models

    spec = models.ModelSpec(name="smollm2-135m") if name == "smollm2" else models.ModelSpec(
        name="tiny-gpt2", vocab_size=2048, n_embd=128, n_layer=4, n_head=4, max_len=128)
    model, _ = models.build(spec)
    return model, model.config.vocab_size


def _worker(rank, world, port, args, out):
    import torch

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.distributed.init_process_group(args.backend, rank=rank, world_size=world)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    from torch.utils.data import TensorDataset

    from dpaudit.trainers import distributed
    from dpaudit.trainers import loss as lossmod

    model, vocab = _model(args.model)
    model.train()
    n = args.batch * 8
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (n, args.seq), generator=g)
    data = TensorDataset(ids, torch.ones_like(ids), ids.clone())
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if args.mode == "dp":
        module, opt, _, loader = distributed.record_level(model, opt, data, sigma=1.0, clipping_norm=0.1,
                                                          expected_batch_size=args.batch, sample_rate=args.batch / n,
                                                          grad_sample_mode="hooks", seed=0)
        batches = iter(loader)

        def next_batch():
            nonlocal batches
            try:
                return next(batches)
            except StopIteration:
                batches = iter(loader)
                return next(batches)
    else:
        module = torch.nn.parallel.DistributedDataParallel(model)
        local = args.batch // world
        k = 0

        def next_batch():
            nonlocal k
            rows = [(k * args.batch + rank * local + j) % n for j in range(local)]
            k += 1
            return [t[rows] for t in data.tensors]

    def step():
        x, m, y = next_batch()
        opt.zero_grad(set_to_none=True)
        loss = lossmod.batch_loss(module, x, m, y, None)
        loss.backward()
        opt.step()

    step()
    times = []
    for _ in range(args.steps):
        torch.distributed.barrier()
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    if rank == 0:
        with open(out, "w") as f:
            f.write(str(statistics.median(times)))
    torch.distributed.destroy_process_group()


def measure(args, mode: str, world: int) -> float:
    import torch

    args.mode = mode
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t")
        torch.multiprocessing.spawn(_worker, args=(world, _free_port(), args, out), nprocs=world, join=True)
        with open(out) as f:
            return float(f.read())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    ap.add_argument("--batch", type=int, default=64, help="expected logical batch over all ranks")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per configuration")
    ap.add_argument("--ranks", default="1,2", help="comma-separated numbers of ranks")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repetitions of every configuration")
    ap.add_argument("--backend", default="gloo")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")
    ranks = [int(r) for r in args.ranks.split(",")]
    res: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeats):
        for mode in ("non-private", "dp"):
            for w in ranks:
                res.setdefault((mode, w), []).append(measure(args, mode, w))
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"model {args.model}, expected batch {args.batch}, seq {args.seq}, median of {args.steps} steps x "
          f"{args.repeats} repeats, {os.cpu_count()} CPUs split between the ranks, backend {args.backend}")
    print(f"{'mode':12s} {'ranks':>5s} {'step s':>8s} {'x 1 rank':>9s} {'DP / non-private':>17s}")
    for mode in ("non-private", "dp"):
        for w in ranks:
            t = med[(mode, w)]
            over = f"{t / med[('non-private', w)]:.2f}" if mode == "dp" else ""
            print(f"{mode:12s} {w:5d} {t:8.3f} {t / med[(mode, ranks[0])]:9.2f} {over:>17s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
