"""Attack scoring throughput relative to a plain batched forward pass, measured in the same run.

    python benchmarks/bench_scoring.py [--model tiny-gpt2|smollm2-135m] [--n 512] [--batch 64] [--repeats 5]

Prints tokens/s for (1) a plain forward pass (logits only, inference mode), (2) the shared attack
scoring pass with everything LOSS/zlib/Min-K%/Min-K%++ need, (3) the same without Min-K%++'s moments,
and (4) exposure scoring with the shared-prefix cache vs plain scoring of the same candidates; then the
ratios. Runs alternate so machine noise hits both sides alike; medians are reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny-gpt2", choices=["tiny-gpt2", "smollm2-135m"])
    ap.add_argument("--n", type=int, default=512, help="texts scored per repeat")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)

    from dpaudit.attacks import exposure, scoring
    from dpaudit.tasks import models, sentiment

    torch.set_num_threads(os.cpu_count() or 1)
    model, tok = models.build(models.ModelSpec(name=args.model))
    model.eval()
    texts = [e["sentence"] for e in sentiment.load(n_train=args.n).train]
    seqs, _ = scoring.encode(tok, texts, None, 64)
    n_tokens = sum(len(s) for s in seqs)

    @torch.inference_mode()
    def plain():
        seqs, _ = scoring.encode(tok, texts, None, 64)  # the baseline tokenises too, as any scorer must
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        for s in range(0, len(order), args.batch):
            ids, att, pos = scoring.pad_batch([seqs[i] for i in order[s:s + args.batch]], tok.pad_token_id)
            model(input_ids=ids, attention_mask=att, position_ids=pos).logits.float()

    def attacks_all():
        scoring.token_features(model, tok, texts, batch_size=args.batch, max_len=64, moments=True)

    def attacks_no_moments():
        scoring.token_features(model, tok, texts, batch_size=args.batch, max_len=64, moments=False)

    prefix, suffix = "My account number is ", "."
    secrets = [f"{i:06d}" for i in range(0, 10 ** 6, 10 ** 6 // args.n)][: args.n]
    cand = [prefix + s + suffix for s in secrets]

    def expo_cached():
        exposure.log_perplexities(model, tok, prefix, secrets, suffix, batch_size=4 * args.batch)

    def expo_plain():
        scoring.token_features(model, tok, cand, [len(prefix)] * len(cand), batch_size=4 * args.batch)

    fns = {"plain forward": plain, "attacks (all, incl. Min-K%++ moments)": attacks_all,
           "attacks (without moments)": attacks_no_moments, "exposure, prefix cached": expo_cached,
           "exposure, plain scoring": expo_plain}
    times = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up
    for _ in range(args.repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"model {args.model}, {len(texts)} texts, {n_tokens} tokens, batch {args.batch}, "
          f"{torch.get_num_threads()} threads, median of {args.repeats}")
    for k in list(fns)[:3]:
        print(f"  {k:40s} {n_tokens / med[k]:10.0f} tokens/s")
    for k in list(fns)[3:]:
        print(f"  {k:40s} {len(secrets) / med[k]:10.0f} candidates/s")
    paired = sorted(p / a for p, a in zip(times["plain forward"], times["attacks (all, incl. Min-K%++ moments)"]))
    print(f"ratio attacks(all) / plain forward      = {med['plain forward'] / med['attacks (all, incl. Min-K%++ moments)']:.3f}"
          f"  (per repeat, paired: median {statistics.median(paired):.3f}, range {paired[0]:.3f}-{paired[-1]:.3f})")
    print(f"ratio attacks(no moments) / plain       = {med['plain forward'] / med['attacks (without moments)']:.3f}")
    print(f"ratio exposure cached / plain scoring   = {med['exposure, plain scoring'] / med['exposure, prefix cached']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
