# The two commands a newcomer runs: `make demo` and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_STAMP := $(VENV)/.system-packages

.PHONY: demo test lint typecheck importlint unit bench backtest-acceptance setup system-packages clean

setup: $(STAMP) $(SYSTEM_STAMP)

# The virtual environment is rebuilt only when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# Debian packages the tests and the demo start for real: Prometheus, Alertmanager, promtool, amtool.
$(SYSTEM_STAMP): scripts/install-system-packages.sh $(STAMP)
	bash scripts/install-system-packages.sh
	@touch $@

system-packages: $(SYSTEM_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check app tests
	$(BIN)/ruff format --check app tests

typecheck: $(STAMP)
	$(BIN)/mypy

importlint: $(STAMP)
	$(BIN)/lint-imports

unit: setup
	$(BIN)/pytest -q

test: setup lint typecheck importlint
	$(BIN)/pytest -q -p no:cacheprovider

demo: setup
	$(BIN)/python -m app.demo

bench: setup
	$(BIN)/python -m tests.perf

# Issue 5's acceptance at full size (200 nodes x 8 GPUs x 14 days through a real Prometheus; ~20 min).
backtest-acceptance: setup
	$(BIN)/python -m tests.perf.backtest_acceptance --out out/acceptance

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
