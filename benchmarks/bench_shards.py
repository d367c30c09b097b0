"""Scoring throughput with and without sharding (``dpaudit evaluate --shard i/n``), on one machine.

    python benchmarks/bench_shards.py [--model tiny-gpt2|smollm2-135m] [--n 512] [--references 2048]
                                      [--shards 2] [--batch 64] [--repeats 3]

The scoring work of an evaluation (the shared attack pass with Min-K%++'s moments over ``--n`` canary texts,
and exposure over ``--references`` sampled secrets) is run (1) in one process with every core, and (2) as
``--shards`` concurrent processes started together, each running its shard (dpaudit/evaluation/shards.py) with the cores
split evenly; the sharded wall time is the slowest shard's. Runs alternate ``--repeats`` times; medians and
the ratio (one process / sharded wall time, > 1 = sharding is faster) are printed. On one CPU machine the
shards share the cores, so this measures the overhead and the gain from running smaller batches side by side;
across GPUs or machines each shard has its own hardware.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _work(args, threads: int, shard):
    import torch

    from dpaudit.attacks import exposure, scoring
    from dpaudit.tasks import models, sentiment

    torch.set_num_threads(threads)
    model, tok = models.build(models.ModelSpec(name=args.model))
    model.eval()
    texts = [e["sentence"] for e in sentiment.load(n_train=args.n).train]
    secrets = [f"{i:06d}" for i in range(0, 10 ** 6, 10 ** 6 // args.references)][: args.references]

    def run():
        scoring.token_features(model, tok, texts, batch_size=args.batch, max_len=64, moments=True, shard=shard)
        exposure.log_perplexities(model, tok, "My account number is ", secrets, ".", 4 * args.batch, shard=shard)

    return run


def _shard_worker(i, args, barrier, out):
    run = _work(args, max(1, (os.cpu_count() or 1) // args.shards), (i, args.shards))
    barrier.wait()
    t = time.perf_counter()
    run()
    out[i] = time.perf_counter() - t


def sharded(args) -> float:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(args.shards), ctx.Array("d", args.shards)
    procs = [ctx.Process(target=_shard_worker, args=(i, args, barrier, out)) for i in range(args.shards)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a shard failed (exit {p.exitcode})")
    return max(out[:])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-gpt2", choices=["tiny-gpt2", "smollm2-135m"])
    ap.add_argument("--n", type=int, default=512, help="canary texts scored by the black-box attacks")
    ap.add_argument("--references", type=int, default=2048, help="sampled secrets scored for exposure")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    one = _work(args, os.cpu_count() or 1, None)
    one()  # warm-up
    t_one, t_sharded = [], []
    for _ in range(args.repeats):
        t = time.perf_counter()
        one()
        t_one.append(time.perf_counter() - t)
        t_sharded.append(sharded(args))
    a, b = statistics.median(t_one), statistics.median(t_sharded)
    print(f"model {args.model}: {args.n} texts (all black-box attacks) + {args.references} exposure secrets, batch "
          f"{args.batch}, {os.cpu_count()} CPUs, median of {args.repeats}")
    print(f"one process            {a:8.2f} s")
    print(f"{args.shards} shards (concurrent) {b:8.2f} s   (slowest shard)")
    print(f"throughput ratio sharded / one process: {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
