#!/usr/bin/env bash
# The GPU measurement of issue wave 5 · 5/5 (item 1) in one call of under 8 minutes, for a machine with one CUDA GPU
# (none of it runs in CI):
#   non-private vs Opacus hooks vs ghost clipping vs book-keeping (layers of one shape batched, trainers/bk_layers.py)
#   vs book-keeping layer by layer (its baseline), full fine-tuning, step time and peak device memory, for the
#   GPT-2-small architecture and SmolLM2-135M's, at batch 16 x 128 (three invocations; the first also profiles
#   book-keeping on SmolLM2: where the time goes, per phase and per kernel) and at batch 128 x 128 (as many of three
#   invocations as the time allows; hooks left out there), each invocation one process with its own non-private
#   baseline (benchmarks/bench_training.py --device cuda).
# Usage: benchmarks/gpu_checks_wave5.sh [OUTDIR]    (logs: OUTDIR/gpu.txt, training_b{16,128}_{1,2,3}.log)
#   env: BUDGET_S (seconds for the whole call, 470), MODES16 / MODES128 (the modes at each batch), PROFILE ('' none)
# Wheels in .whl/ (opacus, dp-accounting: the machine's image lacks them) are installed to /tmp/site first.
# Then: the rows go to reports/bench/gpu.md with the card named (nvidia-smi's line in gpu.txt).
set -u
out=${1:-${OUT:-/tmp/gpu_checks_wave5}}
budget=${BUDGET_S:-470}
mkdir -p "$out"
source "$(dirname "$0")/gpu_setup.sh"  # wheels, the installed layout, offline
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, opacus; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'opacus', opacus.__version__)"; } 2>&1 | tee "$out/gpu.txt"
bench() {  # batch, invocation, timeout, extra arguments
  local log="$out/training_b$1_$2.log"
  timeout "$3" python3 benchmarks/bench_training.py --device cuda --models gpt2-small,smollm2-arch --trainables full \
    --seq 128 --batch "$1" "${@:4}" 2>&1 | grep -v -i "warn" >"$log"
  echo "exit ${PIPESTATUS[0]} (batch $1, invocation $2, $((SECONDS)) s in)" >>"$log"
  grep -E "^(gpt2|smollm2)|^exit" "$log"
}
m16=${MODES16:-none,hooks,ghost,bk,bk-layerwise}
m128=${MODES128:-none,ghost,bk,bk-layerwise}
prof=${PROFILE-smollm2-arch:bk:full,smollm2-arch:bk-layerwise:full}
bench 16 1 100 --modes "$m16" --steps 10 ${prof:+--profile "$prof"}
for run in 2 3; do bench 16 "$run" 80 --modes "$m16" --steps 10; done
for run in 1 2 3; do
  if (( SECONDS + 120 > budget )); then echo "batch 128 invocation $run skipped: $SECONDS s of $budget used" | tee -a "$out/gpu.txt"; break; fi
  bench 128 "$run" 120 --modes "$m128" --steps 5
done
