# mem: `make demo` for a tour, `make test` for the whole suite. Both set up .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Aider, from PyPI: its pins clash with mem's, so it lives in a virtualenv of its own.
AIDER_VENV := tests/agents/aider-venv
AIDER_VERSION := 0.86.2
# It runs on Python 3.10 to 3.12 only: the first of these that does.
AIDER_PYTHONS ?= python3 python3.12 python3.11 python3.10

.DEFAULT_GOAL := help
.PHONY: help demo test test-long test-fast test-scale test-faults test-sync-faults lint bench completions screenshots docs clean agents

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# uv installs in seconds what pip takes a minute over (a sixth of `make test` from a fresh
# clone); pip stays as the fallback when uv cannot be had.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if $(BIN)/python -m pip install --quiet "uv>=0.5,<1" 2>/dev/null; then \
	    $(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[dev]"; \
	else \
	    $(BIN)/python -m pip install --quiet --upgrade pip && \
	    $(BIN)/python -m pip install --quiet -e ".[dev]"; \
	fi
	touch $(STAMP)

demo: $(STAMP) ## A short real tour against a throwaway vault
	@bash scripts/demo.sh

test: $(STAMP) ## Run the whole test suite (lint first)
	$(MAKE) --no-print-directory lint
	@# Temp dirs on tmpfs when there is one: the suite tests behaviour, not the disk, and
	@# fsync costs nothing there (a sixth of the run). test-faults stays on the disk.
	@tmp=$$(mktemp -d /dev/shm/mem-test.XXXXXX 2>/dev/null || mktemp -d); \
	$(BIN)/python -m pytest -q -n auto -m "not scale and not faults and not long" --basetemp=$$tmp; \
	status=$$?; rm -rf $$tmp; exit $$status

test-long: $(STAMP) ## The whole suite with every property example and the long variants (CI runs it too)
	@tmp=$$(mktemp -d /dev/shm/mem-test.XXXXXX 2>/dev/null || mktemp -d); \
	TEST_LONG=1 $(BIN)/python -m pytest -q -n auto -m "not scale and not faults" --basetemp=$$tmp; \
	status=$$?; rm -rf $$tmp; exit $$status

agents: ## Install the agents' CLIs that tests/test_clients.py checks mem against (npm, PyPI)
	@# No install scripts (node-pty, keytar: Gemini CLI's terminal extras, compiled): only
	@# Claude Code's, OpenCode's and Amp's, which put their native binaries in place.
	@# install, not ci: the lock pins every package, but npm cannot record the other
	@# platforms' optional binaries (OpenCode's, Qwen Code's clipboard) that ci demands.
	npm install --prefix tests/agents --ignore-scripts --no-audit --no-fund --loglevel=error
	cd tests/agents/node_modules/@anthropic-ai/claude-code && node install.cjs
	cd tests/agents/node_modules/opencode-ai && node postinstall.mjs
	cd tests/agents/node_modules/@ampcode/cli && node install.cjs
	@# Crush's package fetches its binary from GitHub's releases: where GitHub cannot be
	@# reached its test says so and skips, the others still run.
	cd tests/agents/node_modules/@charmland/crush && node install.js \
	    || echo "warning: Crush's binary could not be fetched (github.com); its test will skip" >&2
	@# Aider: skipped when its virtualenv already has the pinned release.
	@have=$$($(AIDER_VENV)/bin/python -c 'import importlib.metadata as m; \
	    print(m.version("aider-chat"))' 2>/dev/null || true); \
	if [ "$$have" = "$(AIDER_VERSION)" ]; then \
	    echo "aider-chat $(AIDER_VERSION) is in $(AIDER_VENV)"; \
	else \
	    for py in $(AIDER_PYTHONS) ""; do \
	        $$py -c 'import sys; sys.exit(not (3, 10) <= sys.version_info < (3, 13))' \
	            2>/dev/null && break; \
	    done; \
	    [ -n "$$py" ] || { echo "aider-chat $(AIDER_VERSION) needs Python 3.10 to 3.12:" \
	        "make agents AIDER_PYTHONS=/path/to/python3.12" >&2; exit 1; }; \
	    set -e; $$py -m venv $(AIDER_VENV); \
	    $(AIDER_VENV)/bin/python -m pip install --quiet --no-input --disable-pip-version-check \
	        "aider-chat==$(AIDER_VERSION)"; \
	fi

test-scale: $(STAMP) ## The long runs at scale (a gigabyte rollout in flat memory)
	$(BIN)/python -m pytest -q -m scale

test-faults: $(STAMP) ## Every kill point of every command (strace) and the long fuzz
	@command -v strace >/dev/null || { echo "make test-faults needs strace (Debian/Ubuntu: sudo apt-get install strace)" >&2; exit 1; }
	rm -f .faults.jsonl
	FAULTS_LOG=.faults.jsonl $(BIN)/python -m pytest -q -n auto -m faults
	$(BIN)/python -m tests.crash_harness .faults.jsonl

test-sync-faults: $(STAMP) ## Every erasure kind crossed with every remote fault, folder and S3
	$(BIN)/python -m pytest -q -n auto -m faults tests/test_sync_faults.py

test-fast: $(STAMP) ## The edit loop: every test but those marked slow, no lint
	$(BIN)/python -m pytest -q -n auto -m "not slow and not faults"

lint: $(STAMP) ## ruff, mypy --strict, and the layer contracts (import-linter)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: $(STAMP) ## Performance benchmarks (medians and ratios against a same-run floor)
	$(BIN)/python bench/run.py

completions: $(STAMP) ## Regenerate completions/ and docs/cli.md from the CLI
	$(BIN)/python scripts/generate.py

screenshots: $(STAMP) ## Redraw the viewer's pictures (tests/fixtures/browse/*.svg) with the test harness
	BROWSE_SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:xdist tests/test_browse.py -k screenshots

clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
