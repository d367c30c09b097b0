"""The probe on a DDP run of a causal LM (LoRA or full fine-tuning), against the same loop without it.

    torchrun --nproc_per_node W benchmarks/bench_probe_ddp.py [--model smollm2-arch] [--trainable lora|full]
        [--mode hooks|ghost] [--records 1600] [--rate 0.02] [--seq 128] [--epochs 1] [--canaries 1000] [--out DIR]

Every rank builds two copies of the model from one seed and wraps each in Opacus' DPDDP and DistributedDPOptimizer
(Poisson sampling at ``--rate`` over ``--records`` random token sequences, sigma 1, C 1): one plain, one with
``attach_probe(optimizer, m=M, model=model, dataset_size=N)`` on every rank (canaries on the block, clip
canaries, every tensor's noise read, coverage, the online checks). Both copies take the same batches, steps of
the two alternate (so drift of the machine's speed hits both alike), each timed with the device synchronised; the
ratio is the median probe step over the median plain step. Rank 0 then saves the record and Opacus' card and runs
the gate's mechanism checks on them: an honest run must pass every one.

Backend: NCCL on CUDA (one GPU per rank), gloo on CPU. ``smollm2-arch`` is SmolLM2-135M's architecture with random
weights (step time and the mechanism checks do not depend on the weights); ``tiny-llama`` is a 2-layer Llama for
a CPU smoke run. The last line is ``JSON {...}``; a markdown row is printed above it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path


def build(name: str, trainable: str, mode: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.tasks import models
    from dpaudit.trainers import trainable as tr

    if name == "smollm2-arch":  # SmolLM2-135M: its GGUF metadata's architecture
        cfg = models.smollm2_architecture()
    elif name == "tiny-llama":
        cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          tie_word_embeddings=True)
    else:
        raise SystemExit(f"unknown --model {name!r}: smollm2-arch or tiny-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    if trainable == "lora":
        model, _ = tr.apply(model, "lora", 8, 16)
    else:
        tr.prepare_tied(model, "untie", mode, "full")  # ghost clipping cannot share the head with the embeddings
    return model, cfg.vocab_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-arch", help="smollm2-arch (135M, random weights) or tiny-llama.")
    ap.add_argument("--trainable", default="lora", choices=("lora", "full"), help="LoRA adapters or every weight.")
    ap.add_argument("--mode", default="hooks", choices=("hooks", "ghost"), help="Opacus' per-sample mode.")
    ap.add_argument("--records", type=int, default=1600, help="N: training sequences (random tokens).")
    ap.add_argument("--rate", type=float, default=0.02, help="q: Poisson sampling rate of each record per step.")
    ap.add_argument("--seq", type=int, default=128, help="Tokens per sequence.")
    ap.add_argument("--epochs", type=int, default=1, help="Passes over the data (1/q steps each).")
    ap.add_argument("--canaries", type=int, default=1000, help="m: the probe's canaries.")
    ap.add_argument("--out", default="", help="Folder for rank 0's probe record and card (default: a temporary one).")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch
    import torch.nn.functional as F
    from opacus import PrivacyEngine
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from torch.utils.data import DataLoader, TensorDataset

    from dpaudit import api

    cuda = torch.cuda.is_available()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.distributed.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    g = torch.Generator().manual_seed(1)
    vocab = 512 if args.model == "tiny-llama" else 49152
    data = TensorDataset(torch.randint(0, vocab, (args.records, args.seq), generator=g))
    batch = max(1, round(args.rate * args.records))

    def private(probe: bool):
        model, _ = build(args.model, args.trainable, args.mode)
        model = DPDDP(model.to(device))
        torch.manual_seed(1000 + rank)  # each rank its own sampling stream
        engine = PrivacyEngine(accountant="prv")
        params = [p for p in model.parameters() if p.requires_grad]
        kw = dict(module=model, optimizer=torch.optim.AdamW(params, lr=1e-4), data_loader=DataLoader(data, batch_size=batch),
                  noise_multiplier=1.0, max_grad_norm=1.0)
        if args.mode == "ghost":
            model, opt, crit, loader = engine.make_private(**kw, grad_sample_mode="ghost",
                                                           criterion=torch.nn.CrossEntropyLoss(reduction="mean"))
        else:
            (model, opt, loader), crit = engine.make_private(**kw), None
        pr = (api.attach_probe(opt, sample_rate=loader.sample_rate, m=args.canaries, seed=0, model=model,
                               dataset_size=len(data), on_fail=None) if probe else None)
        return model, opt, crit, loader, engine, pr

    plain, probed = private(False), private(True)

    def step(copy, ids) -> float:
        model, opt, crit = copy[:3]
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        opt.zero_grad()
        pos = torch.arange(ids.shape[1], device=device).repeat(ids.shape[0], 1)
        logits = model(input_ids=ids, position_ids=pos).logits[:, :-1]
        if len(ids) == 0:  # an empty Poisson batch still takes its (noise-only) step
            (logits.sum() * 0).backward()
        elif crit is None:
            F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none").mean(1).mean().backward()
        else:
            crit(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), shape=ids[:, 1:].shape).backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    times = {"plain": [], "probe": []}
    i = 0
    t_start = time.time()
    for _ in range(args.epochs):
        for (ids,) in probed[3]:
            ids = ids.to(device)
            pair = [("plain", plain), ("probe", probed)] if i % 2 == 0 else [("probe", probed), ("plain", plain)]
            for name, copy in pair:
                t = step(copy, ids)
                if i >= 3:  # warm-up
                    times[name].append(t)
            i += 1
    wall = time.time() - t_start
    row = {"model": args.model, "trainable": args.trainable, "mode": args.mode, "world": world,
           "backend": "nccl" if cuda else "gloo",
           "device": torch.cuda.get_device_name(device) if cuda else "cpu", "torch": torch.__version__,
           "records": args.records, "rate": args.rate, "seq": args.seq, "steps": i, "m": args.canaries,
           "plain_ms": 1000 * statistics.median(times["plain"]), "probe_ms": 1000 * statistics.median(times["probe"]),
           "peak_gb": torch.cuda.max_memory_allocated(device) / 2 ** 30 if cuda else None, "wall_s": round(wall, 1),
           "trainable_params": sum(p.numel() for p in probed[0].parameters() if p.requires_grad)}
    row["ratio"] = row["probe_ms"] / row["plain_ms"]
    if rank == 0:
        from dpaudit.evaluation import evidence, scoring
        from dpaudit.gate import mechanism_rules

        out = Path(args.out or tempfile.mkdtemp(prefix="dpaudit-probe-ddp-"))
        out.mkdir(parents=True, exist_ok=True)
        pr, engine, loader, opt = probed[5], probed[4], probed[3], probed[1]
        pr.save(out)
        from safetensors.torch import save_model

        save_model(probed[0], str(out / "model.safetensors"))  # the weights beside the record (the check ``weights``)
        card = api.card_from_opacus(engine, loader, opt, delta=1e-5)
        card.save(out / "privacy_card.json")
        checks = [e.as_dict() for e in evidence.mechanism_checks(scoring.whitebox(out), card)]
        row["checks"] = {c["check"]: c["status"] for e in checks for c in e["checks"]}
        row["fail_lines"] = mechanism_rules.failures("run", {"mechanism_checks": checks}, None, False)
        row["online_alarms"] = {k: v["step"] for k, v in pr.online.alarms.items()}
        row["epsilon"] = card.claim.epsilon
        print(f"| {args.model} | {args.trainable} | {args.mode} | {world} x {row['backend']} | {row['device']} | "
              f"{row['steps']} | {row['plain_ms']:.1f} ms | {row['probe_ms']:.1f} ms | {row['ratio']:.3f} | "
              f"{', '.join(f'{k} {v}' for k, v in row['checks'].items())} | {len(row['fail_lines'])} |")
        print("JSON " + json.dumps(row))
        sys.stdout.flush()
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
