"""Step time and peak memory of non-private vs Opacus hooks vs ghost clipping vs book-keeping (one backward),
full and LoRA.

    python benchmarks/bench_training.py [--models minilm,smollm2,gpt2-small] [--batch 8] [--seq 64]
                                        [--steps 3] [--cap-gb 8] [--largest-batch minilm]
                                        [--tied untie|freeze] [--trainables full,lora]
                                        [--modes none,hooks,ghost,bk,bk-serial] [--device cuda]

Each configuration runs in its own process (so peak RSS is its own), on random token batches of the
same shape: 1 warm-up step, then the median of ``--steps`` timed steps. Ratios are against the
non-private run of the same model and trainable set, measured in the same invocation. Tied embeddings
(SmolLM2) are untied for ghost full fine-tuning (``--tied untie``), or frozen in every mode of full
fine-tuning (``--tied freeze``, so the baseline trains the same parameters). With
``--largest-batch``, the batch is doubled until peak RSS passes ``--cap-gb`` for those models.

On a GPU (``--device cuda``) every configuration runs in one process, one after another (each built, timed and
freed before the next; the device's peak allocated memory is reset between them, so each peak is its own);
steps are timed with the device synchronised. ``smollm2-arch`` and ``gpt2-small`` are random-weight models of
the real architectures (step time and memory do not depend on the weights), for machines without SmolLM2's
GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from dpaudit.trainers import loss as lossmod
from dpaudit.trainers import mechanism

MODES = ("none", "hooks", "ghost", "bk", "bk-serial", "bk-layerwise")  # bk: book-keeping clipping,
# trainers/bk_clipping.py; bk-serial: the same with its noise drawn on one thread by one generator (Opacus' draw,
# trainers/noise.add_gaussian_ below its threshold): the baseline of the block-wise draw; bk-layerwise: the same with
# its norms and clipped sums computed layer by layer (trainers/bk_layers.GROUP_BYTES = 0): the baseline of the
# batched layers; each measured in the same invocation


def build(name: str):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.tasks import models

    if name == "minilm":
        m, _ = models.build(models.ModelSpec(name="minilm-l6"))
        return m, "cls", m.config.vocab_size
    if name == "smollm2":
        m, _ = models.build(models.ModelSpec(name="smollm2-135m"))
        return m, "lm", m.config.vocab_size
    if name == "smollm2-arch":  # SmolLM2-135M's architecture (its GGUF metadata), random weights, tied embeddings
        from transformers import LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(models.smollm2_architecture()), "lm", 49152
    if name == "gpt2-small":
        cfg = GPT2Config(vocab_size=50257, n_positions=256, n_embd=768, n_layer=12, n_head=12, tie_word_embeddings=False)
        torch.manual_seed(0)
        return GPT2LMHeadModel(cfg), "lm", 50257
    raise SystemExit(f"unknown model {name}")


def one(name: str, mode: str, which: str, batch: int, seq: int, steps: int, tied: str = "untie",
        device: str = "cpu", profile: bool = False) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit.trainers import engine, trainable

    torch.set_num_threads(os.cpu_count() or 1)
    label = mode
    if mode == "bk-serial":
        from dpaudit.trainers import noise

        noise.PARALLEL_MIN, mode = float("inf"), "bk"
    if mode == "bk-layerwise":
        from dpaudit.trainers import bk_layers

        bk_layers.GROUP_BYTES, mode = 0, "bk"
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model, kind, vocab = build(name)
    if which == "full":
        trainable.prepare_tied(model, tied, mode, which)
    if which == "lora":
        model, _ = trainable.apply(model, "lora", 8, 16)  # BERT: query/value adapters + the head
    model.to(device).train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch * 4, seq), generator=g)
    mask = torch.ones_like(ids)
    if kind == "cls":  # the engine's classifier records: the label in column 0, -100 elsewhere
        targets = torch.full_like(ids, -100)
        targets[:, 0] = torch.randint(0, 2, (batch * 4,), generator=g)
    else:
        targets = ids.clone()
    ids, mask, targets = ids.to(device), mask.to(device), targets.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4)
    loader = DataLoader(TensorDataset(ids, mask, targets), batch_size=batch)
    crit = None
    if mode != "none":
        cfg = engine.EngineConfig(target_epsilon=8.0, clipping_norm=0.1, grad_sample_mode=mode)
        model, opt, crit, _ = mechanism.record_level(model, opt, loader, sigma=1.0, clipping_norm=cfg.clipping_norm, grad_sample_mode=cfg.grad_sample_mode, seed=cfg.seed)

    rf = torch.profiler.record_function

    def step(b):
        x, m, y = (t[b * batch:(b + 1) * batch] for t in (ids, mask, targets))
        opt.zero_grad(set_to_none=True)
        with rf("step.forward"):
            loss = lossmod.batch_loss(model, x, m, y, crit)
        with rf("step.backward"):
            loss.backward()
        with rf("step.optimizer"):
            opt.step()
        if cuda:
            torch.cuda.synchronize(device)

    step(0)
    times = []
    for k in range(steps):
        t = time.perf_counter()
        step((k + 1) % 4)
        times.append(time.perf_counter() - t)
    if profile:  # where the time goes: the phases above and book-keeping's own (bk.*), then the busiest kernels
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            for k in range(3):
                step(k % 4)
        avg = prof.key_averages()
        dev = "self_device_time_total" if hasattr(avg[0], "self_device_time_total") else "self_cuda_time_total"
        print(f"PROFILE {name} {label} {which} batch {batch}: 3 steps, {len(prof.events())} events")
        for e in sorted(avg, key=lambda e: e.key):
            if e.key.startswith(("step.", "bk.")):
                print(f"  phase {e.key:18s} cpu {e.cpu_time_total / 3e3:9.2f} ms/step  device "
                      f"{getattr(e, 'device_time_total', getattr(e, 'cuda_time_total', 0)) / 3e3:9.2f} ms/step")
        print(avg.table(sort_by=dev if cuda else "self_cpu_time_total", row_limit=22, max_name_column_width=60))
    peak = (torch.cuda.max_memory_allocated(device) / 2 ** 30 if cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20)
    return {"model": name, "mode": label, "trainable": which, "batch": batch, "seq": seq, "tied": tied,
            "device": device, "step_s": statistics.median(times), "peak_rss_gb": peak}


def in_process(args, name, mode, which, batch) -> dict:
    """One configuration in this process (GPU: a child per configuration would pay the CUDA start each time);
    freed before the next, so the device's peak allocated memory is this configuration's own."""
    import gc

    import torch

    from dpaudit.trainers import bk_layers, noise

    defaults = bk_layers.GROUP_BYTES, noise.PARALLEL_MIN
    try:
        return one(name, mode, which, batch, args.seq, args.steps, args.tied, args.device,
                   profile=f"{name}:{mode}:{which}" in args.profile.split(","))
    except Exception as e:  # a configuration that fails (out of memory, an unsupported layer) is a row, not a stop
        return {"model": name, "mode": mode, "trainable": which, "batch": batch, "error": f"{type(e).__name__}: {e}"[:160]}
    finally:  # the baselines' switches back to their defaults for the next configuration
        bk_layers.GROUP_BYTES, noise.PARALLEL_MIN = defaults
        gc.collect()
        torch.cuda.empty_cache()


def run_child(args, name, mode, which, batch) -> dict:
    if args.device != "cpu":
        return in_process(args, name, mode, which, batch)
    cmd = [sys.executable, __file__, "--one", name, mode, which, str(batch), "--seq", str(args.seq), "--steps", str(args.steps),
           "--tied", args.tied, "--profile", args.profile]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": name, "mode": mode, "trainable": which, "batch": batch, "error": err[:160]}
    lines = p.stdout.strip().splitlines()
    if args.profile:  # the child's profile, then its row
        print("\n".join(lines[:-1]))
    return json.loads(lines[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,smollm2,gpt2-small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cap-gb", type=float, default=8.0)
    ap.add_argument("--largest-batch", default="", help="comma-separated models to search the largest batch for")
    ap.add_argument("--tied", choices=("untie", "freeze"), default="untie",
                    help="tied input/output embeddings: untie for ghost full fine-tuning, or freeze in every mode")
    ap.add_argument("--trainables", default="full,lora", help="comma-separated: full, lora")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated, 'none' (the non-private baseline the ratios divide by) first: " + ", ".join(MODES))
    ap.add_argument("--device", default="cpu",
                    help="cpu (each configuration in its own process, peak RSS) or cuda[:i] (one process, peak "
                         "allocated device memory; the column is then GPU GB)")
    ap.add_argument("--profile", default="",
                    help="comma-separated MODEL:MODE:TRAINABLE (e.g. smollm2-arch:bk:full): after timing, 3 more steps "
                         "of that configuration under torch.profiler; prints each phase's time and the busiest kernels "
                         "(with --device cuda, or on the CPU)")
    ap.add_argument("--one", nargs=4, metavar=("MODEL", "MODE", "TRAINABLE", "BATCH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    modes = args.modes.split(",")
    if modes[0] != "none" or any(m not in MODES for m in modes):
        ap.error(f"--modes must start with none and name only {', '.join(MODES)}, got {args.modes!r}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")
    if args.one:
        name, mode, which, batch = args.one
        print(json.dumps(one(name, mode, which, int(batch), args.seq, args.steps, args.tied, args.device,
                             profile=f"{name}:{mode}:{which}" in args.profile.split(","))))
        return 0
    rows = []
    where = f"{os.cpu_count()} CPUs"
    if args.device != "cpu":
        import torch

        where = f"{torch.cuda.get_device_name(args.device)}, torch {torch.__version__}, peak = max allocated"
    print(f"batch {args.batch}, seq {args.seq}, median of {args.steps} steps, {where}")
    print(f"{'model':11s} {'trainable':9s} {'mode':6s} {'step s':>8s} {'x non-private':>14s} {'peak GB':>8s} {'x non-private':>14s}")
    for name in args.models.split(","):
        for which in args.trainables.split(","):
            base = None
            for mode in modes:
                r = run_child(args, name, mode, which, args.batch)
                rows.append(r)
                if "error" in r:
                    print(f"{name:11s} {which:9s} {mode:6s} FAILED: {r['error']}")
                    continue
                if mode == "none":
                    base = r
                rt = r["step_s"] / base["step_s"] if base else float("nan")
                rm = r["peak_rss_gb"] / base["peak_rss_gb"] if base else float("nan")
                r["time_ratio"], r["mem_ratio"] = rt, rm
                print(f"{name:11s} {which:9s} {mode:6s} {r['step_s']:8.3f} {rt:14.2f} {r['peak_rss_gb']:8.2f} {rm:14.2f}")
                sys.stdout.flush()
    for name in [m for m in args.largest_batch.split(",") if m]:
        for which in ("full", "lora"):
            for mode in modes:
                b, best = args.batch, None
                while b <= 512:
                    r = run_child(args, name, mode, which, b)
                    if "error" in r or r["peak_rss_gb"] > args.cap_gb:
                        break
                    best, b = b, b * 2
                print(f"largest batch under {args.cap_gb} GB: {name} {which} {mode}: {best}")
                rows.append({"model": name, "trainable": which, "mode": mode, "largest_batch": best, "cap_gb": args.cap_gb})
    print("JSON " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
