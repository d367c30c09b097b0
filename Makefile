# Two entry points (README): `make demo` runs the main job, `make test` runs the tests.
# Both create and fill the virtual environment when it is missing.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_PROGRESS_BARS := 1

.PHONY: demo demo-refresh test test-fast test-jax test-dp-transformers lint bench ci-audit wheel-check clean-venv wordnet

# The pins go in with uv (from the package index, put into the venv by pip): about 45 s where pip takes 150 s on two
# cores, and the same wheels. uv reads no pip configuration, so it is pointed at the local CPU wheel of torch where one
# lies (/opt/wheels on the project's machines; torch==2.13.0 then resolves to 2.13.0+cpu, the higher local version).
# Where uv cannot be installed, pip does the same three steps.
UV_PIP = $(BIN)/uv pip install -q --python $(BIN)/python --compile-bytecode $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels)

# The optional extras below: uv where the main install put it there, else pip.
EXTRA_INSTALL = $(if $(wildcard $(BIN)/uv),$(UV_PIP),$(BIN)/pip install -q)

$(BIN)/.installed: requirements.txt requirements-assets.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch==2.13.0 is named in this same command (requirements.txt) so the CPU wheel is kept
	if $(BIN)/pip install -q uv==0.13.9 2>/dev/null; then \
	  $(UV_PIP) -r requirements.txt && $(UV_PIP) --no-deps -r requirements-assets.txt && $(UV_PIP) --no-deps -e . ; \
	else \
	  $(BIN)/pip install -q -r requirements.txt && $(BIN)/pip install -q --no-deps -r requirements-assets.txt \
	    && $(BIN)/pip install -q --no-deps -e . ; \
	fi
	touch $@

# The demo writes into out/demo (ignored by git): a newcomer's first command leaves the repository clean.
demo: $(BIN)/.installed
	$(BIN)/dpaudit run configs/demo.toml --out out/demo

# Refresh the committed copy under reports/demo (cards, manifests, run records, reports; no weights: .gitignore).
demo-refresh: $(BIN)/.installed
	$(BIN)/dpaudit run configs/demo.toml --out reports/demo --quiet

# ruff, then the layer rules of docs/architecture.md as import-linter contracts, then mypy (pyproject.toml)
lint: $(BIN)/.installed
	$(BIN)/ruff check dpaudit trainers attacks tasks tests benchmarks scripts experiments examples setup.py
	BIN=$(BIN) .ci/lint_imports.sh
	$(BIN)/mypy  # the type checker over the packages [tool.mypy] names (pyproject.toml)

# Optional: WordNet for METEOR (Debian packages, no root needed). Failure only leaves METEOR out.
wordnet: $(BIN)/.installed
	-$(BIN)/dpaudit assets --wordnet > /dev/null || echo "WordNet not installed: METEOR is left out of reports"

# Whole files to each worker, the longest first (tests/conftest.py orders them by tests/durations.json; xdist's own
# reorder, by number of tests per file, would start the few-test, long end-to-end files last).
test: $(BIN)/.installed lint wordnet
	$(BIN)/pytest -q --durations=10 --numprocesses=auto --maxprocesses=4 --dist=loadfile --no-loadscope-reorder

test-fast: $(BIN)/.installed
	$(BIN)/pytest -q -m "not slow"

# The optional JAX extra: jax-privacy's own DP-SGD components with the functional probe (skipped by `make test`
# where jax is absent). torch==2.13.0 is named in the same command (-c requirements.txt) so pip keeps the CPU wheel.
$(BIN)/.installed-jax: $(BIN)/.installed requirements-jax.txt
	$(EXTRA_INSTALL) -r requirements-jax.txt -c requirements.txt
	touch $@

test-jax: $(BIN)/.installed-jax
	$(BIN)/pytest -q tests/probe/test_jax_loop.py -p no:cacheprovider

# The optional peer: dp-transformers 1.0.0's own trainer with the probe attached (skipped by `make test` where it is
# absent). --no-deps: its metadata pins a torch and prv-accountant older than the project's (requirements-dp-transformers.txt).
$(BIN)/.installed-dp-transformers: $(BIN)/.installed requirements-dp-transformers.txt
	$(EXTRA_INSTALL) --no-deps -r requirements-dp-transformers.txt
	touch $@

test-dp-transformers: $(BIN)/.installed-dp-transformers
	$(BIN)/pytest -q tests/probe/test_dp_transformers_trainer.py -p no:cacheprovider

# The project's own privacy gate: a tiny audit whose DP model must satisfy the default policy.
ci-audit: $(BIN)/.installed
	$(BIN)/dpaudit run configs/tiny.toml --out out/ci-audit --quiet
	$(BIN)/dpaudit check out/ci-audit/dp-eps1/report/report.json --policy configs/policy.toml

# The built wheel in fresh virtual environments: the gate's install (pip install dpaudit), then [audit], running their commands; dpaudit[train]
# resolved beside a torch 2.14.1, and both jobs of examples/github-actions.yml in a folder standing for a user's repository.
wheel-check: ci-audit
	.ci/wheel_check.sh out/ci-audit/dp-eps1/checkpoint

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/bench_scoring.py

clean-venv:
	rm -rf $(VENV)
