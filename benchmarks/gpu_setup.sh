# Sourced by the GPU check scripts (benchmarks/gpu_checks*.sh): wheels in .whl/ (packages the machine's image lacks,
# e.g. opacus and dp-accounting) installed to /tmp/site, the installed layout of dpaudit (setup.py maps trainers/,
# attacks/, tasks/ to dpaudit.*) as a copy on PYTHONPATH, offline Hugging Face, unbuffered output.
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 2
fi
rm -rf /tmp/dpaudit_pkg && mkdir -p /tmp/dpaudit_pkg && cp -r dpaudit /tmp/dpaudit_pkg/ \
  && for d in trainers attacks tasks; do cp -r "$d" "/tmp/dpaudit_pkg/dpaudit/$d"; done
export PYTHONPATH=/tmp/dpaudit_pkg:$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
