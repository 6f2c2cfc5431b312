# Every target sets up .venv on first use, so on a fresh machine `make test` does everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SOURCES := gateway clients/python/src clients/python/contract/src clients/examples tests proto/generate.py bench

.PHONY: install serve test test-fast check lint typecheck generate check-generated bench clean

install: $(STAMP)

# Reinstalls only when the dependency declarations change.
$(STAMP): pyproject.toml clients/python/pyproject.toml clients/python/contract/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e clients/python/contract -e '.[dev]' -e clients/python
	touch $(STAMP)

serve: $(STAMP)
	$(BIN)/harness-gateway serve $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Skips the end-to-end tests that start real daemon processes.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/buf lint proto
	$(BIN)/buf format --exit-code --diff proto

typecheck: $(STAMP)
	$(BIN)/mypy gateway clients/python/src clients/python/contract/src clients/examples tests

generate: $(STAMP)
	$(BIN)/python proto/generate.py

check-generated: $(STAMP)
	$(BIN)/python proto/generate.py --check

check: lint typecheck check-generated test

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
