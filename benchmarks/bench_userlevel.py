"""Step time of user-wise DP-SGD (Chua et al., Alg. 2: per-user mean gradients clipped per user, noise once)
against the same loop without privacy, LoRA and full fine-tuning, same model, users and records.

    python benchmarks/bench_userlevel.py [--models smollm2,gpt2-small] [--users 8] [--k 4] [--seq 64] [--steps 3]
                                         [--trainables lora,full] [--modes hooks,bk]

Each configuration runs in its own process: ``--users`` sampled users of ``--k`` records of ``--seq`` random
tokens each, through the engine's own step (trainers/units.UserStep: Opacus per-record gradients summed by owner,
clipped per user by trainers/mechanism.UserDPOptimizer, noise once; or, ``bk``, trainers/bk_clipping.py: each
user's gradient clipped from one backward over its records laid end to end, never per record) and optimizer
step, against the non-private
UserStep (the mean over users of each user's mean record loss, plain autograd) and Adam. One warm-up step, then
the median of ``--steps``; the ratio is against the non-private run of the same model and trainable set, measured
in the same invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def one(name: str, mode: str, which: str, users: int, k: int, seq: int, steps: int) -> dict:
    import torch

    from dpaudit.trainers import mechanism, trainable
    from dpaudit.trainers.data import UserBatches
    from dpaudit.trainers.units import UserStep

    sys.path.insert(0, os.path.dirname(__file__))
    from bench_training import build

    torch.set_num_threads(os.cpu_count() or 1)
    model, kind, vocab = build(name)
    private = mode != "none"
    if which == "full":
        trainable.prepare_tied(model, "freeze", "hooks", which)
    else:
        model, _ = trainable.apply(model, "lora", 8, 16)
    model.train()
    g = torch.Generator().manual_seed(0)
    recs = {f"u{u}": [{"input_ids": torch.randint(0, vocab, (seq,), generator=g).tolist()} for _ in range(k)]
            for u in range(users)}
    for rs in recs.values():
        for r in rs:
            r["targets"] = [-100] + r["input_ids"][1:]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4)
    module = model
    if private:
        module, opt = mechanism.user_level(model, opt, sigma=1.0, clipping_norm=0.1, expected_users=users, seed=0,
                                           grad_sample_mode=mode)
    batches = UserBatches(recs, pad_id=0, max_len=seq, q=1.0, seed=0)
    step_fn = UserStep(module, batches, params, private, 64)
    sampled = sorted(recs)

    def step():
        opt.zero_grad(set_to_none=True)
        step_fn(sampled)
        opt.step()

    step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {"model": name, "mode": mode, "trainable": which, "step_s": statistics.median(times)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,gpt2-small")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--k", type=int, default=4, help="records of each sampled user")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--trainables", default="lora,full")
    ap.add_argument("--modes", default="hooks,bk", help="comma-separated DP modes: hooks (Opacus per-record "
                    "gradients summed by user), bk (book-keeping, per user from one backward)")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "MODE", "TRAINABLE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")
    if args.one:
        name, mode, which = args.one
        print(json.dumps(one(name, mode, which, args.users, args.k, args.seq, args.steps)))
        return 0
    modes = args.modes.split(",")
    if not modes or any(m not in ("hooks", "bk") for m in modes):
        ap.error(f"--modes names hooks and/or bk, got {args.modes!r}")
    print(f"| model | trainable | non-private step s | DP mode | user-wise DP step s | × non-private |  "
          f"({args.users} users × {args.k} records × {args.seq} tokens, median of {args.steps}, {os.cpu_count()} CPUs)")
    print("|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for which in args.trainables.split(","):
            base = None
            for mode in ["none", *modes]:
                p = subprocess.run([sys.executable, __file__, "--one", name, mode, which, "--users", str(args.users),
                                    "--k", str(args.k), "--seq", str(args.seq), "--steps", str(args.steps)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}, no error line"])[-1][:120]
                    print(f"| {name} | {which} | {'FAILED' if base is None else f'{base:.3f}'} | {mode} | FAILED: {why} | |")
                    if base is None:
                        break
                    continue
                t = json.loads(p.stdout.strip().splitlines()[-1])["step_s"]
                if mode == "none":
                    base = t
                    continue
                print(f"| {name} | {which} | {base:.3f} | {mode} | {t:.3f} | {t / base:.2f} |")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
