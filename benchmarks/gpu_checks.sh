#!/usr/bin/env bash
# The GPU checks of wave 4 in one call, for a machine with one CUDA GPU (none of it runs in CI):
#   1. the probe on a DDP run (DPDDP + DistributedDPOptimizer, NCCL) of SmolLM2-135M's architecture, LoRA and
#      full fine-tuning: its step time against the same loop without it, and the gate's mechanism checks on the
#      honest run (benchmarks/bench_probe_ddp.py);
#   2. non-private vs Opacus hooks vs ghost clipping vs book-keeping, step time and peak device memory, for the
#      GPT-2-small architecture and SmolLM2-135M's, full and LoRA (benchmarks/bench_training.py --device cuda).
# Usage: benchmarks/gpu_checks.sh [OUTDIR]    (logs: OUTDIR/gpu.txt, probe_ddp_*.log, training.log)
# Wheels in .whl/ (packages the machine lacks, e.g. opacus and dp-accounting) are installed to /tmp/site first.
set -u
out=${1:-${OUT:-/tmp/gpu_checks}}
mkdir -p "$out"
source "$(dirname "$0")/gpu_setup.sh"  # wheels, the installed layout, offline
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, peft, opacus; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, 'opacus', opacus.__version__)"; } 2>&1 | tee "$out/gpu.txt"
echo "| model | trainable | mode | ranks | device | steps | plain | probe | ratio | mechanism checks | FAIL lines |"
for t in lora full; do
  timeout 140 torchrun --nproc_per_node 1 benchmarks/bench_probe_ddp.py --model smollm2-arch --trainable "$t" \
    --records 3200 --rate 0.01 --seq 128 --canaries 1000 >"$out/probe_ddp_$t.log" 2>&1
  echo "exit $? (probe, $t)" >>"$out/probe_ddp_$t.log"
  grep "^|" "$out/probe_ddp_$t.log" || tail -3 "$out/probe_ddp_$t.log"
done
timeout 200 python3 benchmarks/bench_training.py --device cuda --models gpt2-small,smollm2-arch --batch 16 --seq 128 \
  --steps 10 2>&1 | grep -v -i "warn" | tee "$out/training.log"
