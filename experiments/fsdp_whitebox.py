"""The white-box bound of an FSDP run against the card mechanism's median one-run limit, beside one process
(reports/probe_fsdp/README.md):

    nice python experiments/fsdp_whitebox.py --out reports/probe_fsdp

One config, two runs of it: ``grad_sample_mode = "ghost"`` in one process and ``"ghost_fsdp"`` under
``torchrun --nproc_per_node 2`` (gloo, standing in for 2 GPUs), a tiny Llama (built here from its config, no
weights downloaded) with ``--canaries`` Dirac canaries on the probe's block. Each run's report states the bound
its white-box audit reached and, in ``audit_limits``, the median bound the card's own mechanism allows an audit
of the same m, guesses and confidence (the limit, computed before the scores are read). This script reads both
from the two report.json files and writes the table; the run folders stay in ``--work`` (weights are not
committed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

CONFIG = """
[task]
n_train = {n_train}
n_test = 64
[model]
path = "{model}"
max_len = 32
[canaries]
m = 10
[train]
gradient_canaries = {m}
gradient_canary_coordinates = "block"
grad_sample_mode = "{mode}"
delta = 1e-5
epochs = {epochs}
batch_size = {batch}
lr = 1e-3
seed = {seed}
[evaluate]
attacks = ["loss"]
n_references = 20
enumerate_limit = 0
[[variants]]
name = "dp"
target_epsilon = {epsilon}
"""


def build_model(folder: Path) -> None:
    """A 2-layer Llama (width 32) with the project's public BPE tokenizer, as tests/trainers/test_fsdp.py builds it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.tasks import models

    tok = models.public_bpe_tokenizer(512)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                 tie_word_embeddings=False, bos_token_id=tok.eos_token_id,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)).save_pretrained(folder)
    tok.save_pretrained(folder)


def run(config: Path, out: Path, ranks: int) -> float:
    head = [sys.executable] if ranks == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                "--nproc_per_node", str(ranks)]
    env = {**os.environ, "OMP_NUM_THREADS": "1" if ranks > 1 else os.environ.get("OMP_NUM_THREADS", "2")}
    start = time.time()
    done = subprocess.run([*head, "-m", "dpaudit.cli", "run", str(config), "--out", str(out), "--quiet"], env=env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{config.name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return time.time() - start


def row(folder: Path) -> dict:
    rep = json.loads((folder / "dp" / "report" / "report.json").read_text())
    (lim,) = [a for a in rep["audit_limits"] if a["attack"] == "whitebox_gradient"]
    best = [e for e in rep["empirical"] if e["attack"] == "whitebox_gradient"][0]
    (checks,) = rep["mechanism_checks"]
    mech = lim["mechanism_limit"]
    return {"optimizer": checks["optimizer"], "epsilon": rep["claim"]["epsilon"], "m": best["m"],
            "guesses": [best["k_pos"], best["k_neg"]], "right": best["v"], "confidence": best["confidence"],
            "bound": best["epsilon_lb"], "ceiling": best["ceiling"], "limit": mech["epsilon_lb"],
            "limit_method": f"{mech['method']} ({mech['simulations'] or mech['pool']} "
                            f"{'simulated audits' if mech['method'] == 'audits' else 'simulated scores per class'})",
            "mechanism": mech["mechanism"],
            "checks": {c["check"]: c["status"] for c in checks["checks"]}}


def same_record(a: Path, b: Path) -> dict:
    """How far the FSDP run's white-box record is from one process's of the same config: the canaries' signs and
    sampled counts, and the largest difference of a per-step projection."""
    import numpy as np

    ra, rb = (json.loads((f / "dp" / "checkpoint" / "gradient_canaries.json").read_text()) for f in (a, b))
    sa, sb = (np.load(f / "dp" / "checkpoint" / r["steps_file"]) for f, r in ((a, ra), (b, rb)))
    return {"signs": ra["signs"] == rb["signs"], "times_sampled": ra["times_sampled"] == rb["times_sampled"],
            "max_projection_difference": float(np.abs(sa.astype(np.float64) - sb).max()) if sa.shape == sb.shape
            else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="Folder for README.md and results.json.")
    ap.add_argument("--work", type=Path, default=Path("/tmp/dpaudit-fsdp-whitebox"),
                    help="Folder for the model and the two run folders (not committed).")
    ap.add_argument("--canaries", type=int, default=20000, help="White-box canaries m on the probe's block.")
    ap.add_argument("--epsilon", type=float, default=8.0, help="The variant's target epsilon (delta 1e-5).")
    ap.add_argument("--n-train", type=int, default=1024, help="Training records.")
    ap.add_argument("--batch", type=int, default=32, help="Expected batch size (q = batch / n_train).")
    ap.add_argument("--epochs", type=int, default=4, help="Epochs (steps = epochs / q).")
    ap.add_argument("--seeds", type=int, default=5, help="Training seeds (each a run in one process and one on 2 "
                    "ranks): the bound is one draw of the audit, the limit its median.")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / "llama"
    if not (model / "config.json").exists():
        build_model(model)
    rows, seconds = {}, {}
    for seed in range(args.seeds):
        for name, mode, ranks in (("one-process", "ghost", 1), ("fsdp-2-ranks", "ghost_fsdp", 2)):
            key = f"{name} seed {seed}"
            config = args.work / f"{name}-{seed}.toml"
            config.write_text(CONFIG.format(n_train=args.n_train, model=model, m=args.canaries, mode=mode,
                                            epochs=args.epochs, batch=args.batch, epsilon=args.epsilon, seed=seed))
            folder = args.work / f"{name}-{seed}"
            if folder.exists():
                shutil.rmtree(folder)
            seconds[key] = round(run(config, folder, ranks), 1)
            rows[key] = row(folder)
            print(f"{key}: bound {rows[key]['bound']:.3f}, limit {rows[key]['limit']:.3f} ({seconds[key]} s)")
        rows[f"fsdp-2-ranks seed {seed}"]["same_record"] = same_record(args.work / f"one-process-{seed}",
                                                                       args.work / f"fsdp-2-ranks-{seed}")
    command = (f"nice python experiments/fsdp_whitebox.py --out {args.out} --canaries {args.canaries} "
               f"--epsilon {args.epsilon:g} --n-train {args.n_train} --batch {args.batch} --epochs {args.epochs} "
               f"--seeds {args.seeds}")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, no GPU (the project's CPU machine)"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps({"command": command, "date": date.today().isoformat(),
                                                        "machine": machine, "seconds": seconds, "rows": rows},
                                                       indent=1) + "\n")
    (args.out / "README.md").write_text(readme(rows, seconds, command, machine))
    print(f"wrote {args.out / 'README.md'}")
    return 0


def readme(rows: dict, seconds: dict, command: str, machine: str) -> str:
    one = next(iter(rows.values()))
    mech = one["mechanism"]
    lines = [
        "# The white-box probe under FSDP: its bound against the card mechanism's limit, beside one process", "",
        f"Made by `{command}` on {date.today().isoformat()} ({machine}; the two ranks are gloo processes on its "
        f"2 cores, standing in for 2 GPUs). Training, evaluation included: " +
        ", ".join(f"{k} {v} s" for k, v in seconds.items()) + ".", "",
        "One config run twice: `grad_sample_mode = \"ghost\"` in one process and `\"ghost_fsdp\"` under `torchrun "
        "--nproc_per_node 2` (Opacus' FSDPOptimizerFastGradientClipping; the probe adds the canaries on rank 0's "
        "block at 1/W, docs/probe.md \"Where it runs\"). A 2-layer Llama (width 32) built from its config, "
        f"q = {mech['sample_rate']:.4g}, σ = {mech['noise_multiplier']:.4g}, {mech['steps']} steps "
        f"(ε = {one['epsilon']:.3g} at δ = 1e-5), m = {one['m']:,} Dirac canaries on the probe's block. "
        "The limit is the median bound an audit of the same m, guesses and confidence reaches on the card's own "
        "mechanism (report.json `audit_limits`, fixed before the scores are read).", "",
        "| run | optimizer | bound at the report's per-test confidence | guesses right | ceiling | the card "
        "mechanism's median limit | share of the limit | mechanism checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        bad = ", ".join(f"{k} ({v})" for k, v in r["checks"].items() if v != "pass")
        lines.append(f"| {name} | {r['optimizer']} | **{r['bound']:.3f}** ({r['confidence']:.4f}) | "
                     f"{r['right']:,} of {sum(r['guesses']):,} | {r['ceiling']:.2f} | {r['limit']:.3f} "
                     f"({r['limit_method']}) | {r['bound'] / r['limit']:.0%} | every one passes"
                     + (f" but {bad}" if bad else "") + " |")
    share = {name: statistics.median(r["bound"] / r["limit"] for k, r in rows.items() if k.startswith(name))
             for name in ("one-process", "fsdp-2-ranks")}
    same = [r["same_record"] for k, r in rows.items() if "same_record" in r]
    diff = max((s["max_projection_difference"] for s in same), default=None)
    lines += ["", f"Median over the {len(same)} seeds, share of the limit: one process **{share['one-process']:.0%}**, "
              f"FSDP on 2 ranks **{share['fsdp-2-ranks']:.0%}** (target of issue [2/5]: ≥ 90% for FSDP, as one "
              f"process reaches; {'met' if share['fsdp-2-ranks'] >= 0.9 else 'not met'}). Each bound is one draw of "
              "an audit whose median is the limit.", "",
              "The FSDP record against one process's of the same config and seed: canary signs "
              f"{'equal' if all(s['signs'] for s in same) else 'DIFFERENT'}, times sampled "
              f"{'equal' if all(s['times_sampled'] for s in same) else 'DIFFERENT'}, largest difference of a "
              f"per-step projection {diff:.3g} (the same seed gives the block the same noise on rank 0 as in one "
              "process: the two records are the same record, so the adapter adds nothing and loses nothing).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
