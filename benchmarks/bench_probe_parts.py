"""The probe's per-step parts at another commit against today's, timed side by side in one process.

    python benchmarks/bench_probe_parts.py --against REV [--rounds 15] [--reps 200]

Loads dpaudit/probe/meters.py and canaries.py as they were at git revision REV next to today's, builds both on the
tiny GPT-2 of benchmarks/bench_probe.py (29 parameter tensors, 1,000 Dirac canaries, 1,024 noise coordinates per
tensor) and times, in interleaved rounds, each version's noise-meter gather, its reading before and after the noise,
and its canary scores; checks the scores agree; prints the medians in ms. Separate processes on a 2-core machine
differ by up to 30% in the probe's whole cost, so a change of a fraction of a millisecond shows only here.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from dpaudit.probe import canaries as canaries_now
from dpaudit.probe import meters as meters_now

ROOT = Path(__file__).resolve().parents[1]


def _at(rev: str, rel: str, name: str, tmp: Path):
    text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    path = tmp / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


class _Slot:
    """A parameter tensor as the probe reads it: its clipped sum before the noise and its gradient after."""

    def __init__(self, p: torch.Tensor):
        self.shape, self.device = p.shape, p.device
        self.summed_grad, self.grad = torch.randn(p.shape), torch.randn(p.shape)

    def numel(self) -> int:
        return int(np.prod(self.shape))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--against", required=True, help="The git revision whose probe parts to time against today's.")
    ap.add_argument("--rounds", type=int, default=15, help="Interleaved rounds (the median is printed).")
    ap.add_argument("--reps", type=int, default=200, help="Calls of each part per round.")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel._from_config(GPT2Config(vocab_size=512, n_positions=32, n_embd=64, n_layer=2, n_head=2,
                                                    tie_word_embeddings=False), attn_implementation="eager")
    slots = [_Slot(p) for p in model.parameters()]
    with tempfile.TemporaryDirectory() as tmp:
        old_m = _at(args.against, "dpaudit/probe/meters.py", "meters_then", Path(tmp))
        old_c = _at(args.against, "dpaudit/probe/canaries.py", "canaries_then", Path(tmp))
    versions = {}
    for label, m_mod, c_mod in ((args.against, old_m, old_c), ("today", meters_now, canaries_now)):
        meter = m_mod.NoiseMeter(slots, per_tensor=1024)
        can = c_mod.GradientCanaries.plan(1000, "dirac", 0, slots, 1.0, 0.1)
        can.start(0)
        versions[label] = (meter, can)
    times: dict = {}
    with torch.no_grad():
        for _ in range(args.rounds):
            for label, (meter, can) in versions.items():
                parts = {"noise meter's gather": lambda m=meter: m._gather("grad"),
                         "noise meter, before and after the noise": lambda m=meter: (m.before(), m.after()),
                         "canary scores": lambda c=can: c.score(lambda k: slots[k].grad, 64.0)}
                for part, f in parts.items():
                    t0 = time.perf_counter()
                    for _ in range(args.reps):
                        f()
                    times.setdefault((part, label), []).append((time.perf_counter() - t0) / args.reps * 1000)
    (_, a), (_, b) = versions.values()
    assert np.array_equal(a.scores, b.scores), "the two versions' canary scores differ"
    print(f"| part | {args.against} (ms) | today (ms) |\n|---|---|---|")
    for part in dict.fromkeys(p for p, _ in times):
        print(f"| {part} | {statistics.median(times[(part, args.against)]):.3f} | "
              f"{statistics.median(times[(part, 'today')]):.3f} |")


if __name__ == "__main__":
    main()
