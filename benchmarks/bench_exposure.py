"""Exact exposure over the whole randomness space: the token trie against today's per-candidate enumeration.

    python benchmarks/bench_exposure.py [--model tiny-gpt2|smollm2-135m] [--length 6] [--baseline 10000]

Times the trie (attacks/exposure_trie.py) on every secret of the space (10^length), and the per-candidate
scorer (attacks/exposure.py, shared-prefix cache) on the first --baseline secrets of the same space in the same
run, extrapolated linearly to the whole space (it costs the same per candidate); prints both, their ratio and
the trie's forward passes. (The per-candidate scorer also scores the suffix and EOS; the trie scores the secret
tokens only. tests/attacks/test_exposure_trie.py checks the trie against a plain forward of every candidate.)
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-gpt2", choices=["tiny-gpt2", "smollm2-135m"])
    ap.add_argument("--length", type=int, default=6, help="secret length in digits: the space has 10^length secrets")
    ap.add_argument("--baseline", type=int, default=10_000, help="secrets the per-candidate scorer is timed on")
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args(argv)

    from dpaudit.attacks import exposure, exposure_trie
    from dpaudit.tasks import models

    torch.set_num_threads(os.cpu_count() or 1)
    model, tok = models.build(models.ModelSpec(name=args.model))
    model.eval()
    prefix, suffix = "My account number is ", "."
    space = ["".join(t) for t in itertools.product("0123456789", repeat=args.length)]
    base = space[:: max(1, len(space) // args.baseline)][: args.baseline]

    t0 = time.perf_counter()
    exposure.log_perplexities(model, tok, prefix, base, suffix, 4 * args.batch)
    t_base = (time.perf_counter() - t0) * len(space) / len(base)
    t0 = time.perf_counter()
    stats = {}
    bits = exposure_trie.log_probs(model, tok, prefix, space, suffix, args.batch, stats=stats)
    t_trie = time.perf_counter() - t0

    print(f"model {args.model}, space 10^{args.length} = {len(space):,} secrets, {torch.get_num_threads()} threads")
    print(f"per-candidate enumeration: {t_base:,.1f} s for the whole space (timed on {len(base):,} secrets, scaled)")
    print(f"token trie:                {t_trie:,.1f} s for the whole space (measured)")
    print(f"ratio (enumeration / trie): {t_base / t_trie:,.1f}x")
    print(f"trie forward passes (internal nodes): {stats['nodes']:,} under {stats['groups']} shared prefix(es); "
          f"all finite: {bool(np.isfinite(bits).all())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
