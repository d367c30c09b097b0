#!/usr/bin/env bash
# The GPU measurement of issue wave 5 · 5/5 (item 1) in one call of under 8 minutes, for a machine with one CUDA GPU
# (none of it runs in CI; prepared on a CPU machine, not yet run: no GPU was lent when it was written):
#   non-private vs Opacus hooks vs ghost clipping vs book-keeping, full fine-tuning, step time and peak device
#   memory, for the GPT-2-small architecture and SmolLM2-135M's, at batch 16 x 128 and at batch 128 x 128 (most of
#   an H100's memory for hooks on SmolLM2), each three invocations (benchmarks/bench_training.py --device cuda:
#   ratios against the non-private run of the same invocation).
# Usage: benchmarks/gpu_checks_wave5.sh [OUTDIR]    (logs: OUTDIR/gpu.txt, training_b{16,128}_{1,2,3}.log)
# Then: the rows go to reports/bench/gpu.md with the card named (nvidia-smi's line in gpu.txt).
set -u
out=${1:-${OUT:-/tmp/gpu_checks_wave5}}
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 2
fi
rm -rf /tmp/dpaudit_pkg && mkdir -p /tmp/dpaudit_pkg && cp -r dpaudit /tmp/dpaudit_pkg/ \
  && for d in trainers attacks tasks; do cp -r "$d" "/tmp/dpaudit_pkg/dpaudit/$d"; done
export PYTHONPATH=/tmp/dpaudit_pkg:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import torch, transformers, opacus; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'opacus', opacus.__version__)"; } 2>&1 | tee "$out/gpu.txt"
for batch in 16 128; do
  for run in 1 2 3; do
    timeout 70 python3 benchmarks/bench_training.py --device cuda --models gpt2-small,smollm2-arch --trainables full \
      --modes none,hooks,ghost,bk --batch "$batch" --seq 128 --steps 10 2>&1 | grep -v -i "warn" \
      >"$out/training_b${batch}_${run}.log"
    echo "exit ${PIPESTATUS[0]} (batch $batch, invocation $run)" >>"$out/training_b${batch}_${run}.log"
    grep "^|" "$out/training_b${batch}_${run}.log" || tail -3 "$out/training_b${batch}_${run}.log"
  done
done
