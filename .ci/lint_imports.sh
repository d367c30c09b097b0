#!/usr/bin/env bash
# Import contracts (pyproject.toml [tool.importlinter]) and the absence of import circles (.ci/check_cycles.py),
# checked on the installed layout: trainers/, attacks/
# and tasks/ are copied under dpaudit/ as the wheel installs them, so the graph is the one that ships.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
root=$(pwd)
case "$BIN" in /*) ;; *) BIN="$root/$BIN" ;; esac
# the copy lives outside the working tree (a grep of the repository never sees a second dpaudit/) and is removed
tree=$(mktemp -d "${TMPDIR:-/tmp}/dpaudit-import-graph.XXXXXX")
trap 'rm -rf "$tree"' EXIT
cp -r dpaudit "$tree/dpaudit"
for sub in trainers attacks tasks; do cp -r "$sub" "$tree/dpaudit/$sub"; done
find "$tree" -name __pycache__ -prune -exec rm -rf {} +
cd "$tree" && PYTHONPATH=. "$BIN/lint-imports" "$root/pyproject.toml" --no-cache
# and no import circle anywhere in the package (import-linter's contracts do not look for circles)
PYTHONPATH=. "$BIN/python" "$root/.ci/check_cycles.py"
