# Every target sets up .venv on first use, so on a fresh machine `make test` does everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
SOURCES := gateway clients/python/src contract/src clients/examples tests proto/generate.py bench deploy/kubernetes/render.py

# pytest runs one worker per core (pytest-xdist); each worker is a pytest session of its own,
# with its own PostgreSQL and NATS servers when its tests ask for them, and every test keeps
# to its own temporary directories and ports (tests/conftest.py, gateway/testing_servers.py).
# `worksteal` hands a finished worker tests still queued at another. `make test PARALLEL=`
# runs serially.
PARALLEL ?= -n auto --dist worksteal

.PHONY: install serve test test-slow test-fast check lint typecheck generate check-generated manifests bench clean node-install node-build test-node

install: $(STAMP)

# Reinstalls only when the dependency declarations change. pip's -qq prints errors only:
# setuptools' editable-install notice would be the first thing a fresh `make serve` shows.
$(STAMP): pyproject.toml clients/python/pyproject.toml contract/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -qq --disable-pip-version-check -e contract -e '.[dev]' -e clients/python
	touch $(STAMP)

# The npm workspace (package.json): the Node client and the example scripts' tools, from
# the committed lockfile; reinstalls only when the lockfile or a package.json changes.
node-install: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json clients/node/package.json
	npm ci --no-audit --no-fund
	touch $(NODE_STAMP)

# The client and its compiled test suite: the cluster suite runs the shared scenarios through
# the built suite (tests/integration/cluster/test_cluster_scenarios_node.py).
node-build: $(NODE_STAMP)
	npm run build --workspace clients/node
	npm run build:test --workspace clients/node

# The Node client's unit tests and shared scenarios, against real gateway processes.
test-node: $(STAMP) $(NODE_STAMP)
	npm test --workspace clients/node

serve: $(STAMP)
	$(BIN)/harness-gateway serve $(ARGS)

# The polyglot e2e test runs the Node example agent, so the client is built first. The tests
# marked `slow` (cluster faults and scenarios through three replicas, NATS node kills,
# PostgreSQL outages) are `make test-slow`; CI runs both (`make check`).
test: $(STAMP) node-build
	$(BIN)/python -m pytest $(PARALLEL) -m "not slow" $(PYTEST_ARGS)
	npm test --workspace clients/node

test-slow: $(STAMP) node-build
	$(BIN)/python -m pytest $(PARALLEL) -m slow $(PYTEST_ARGS)

# Skips the end-to-end tests that start real daemon processes, and the slow cluster tests
# (marked `slow`: NATS node kills, leader failover). CI runs everything (`make check`).
test-fast: $(STAMP)
	$(BIN)/python -m pytest $(PARALLEL) -m "not e2e and not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/buf lint proto
	$(BIN)/buf format --exit-code --diff proto

typecheck: $(STAMP)
	$(BIN)/mypy gateway clients/python/src contract/src clients/examples tests deploy/kubernetes/render.py

generate: $(STAMP) $(NODE_STAMP)
	$(BIN)/python proto/generate.py
	npm run generate --workspace clients/node

check-generated: $(STAMP) $(NODE_STAMP)
	$(BIN)/python proto/generate.py --check
	npm run generate:check --workspace clients/node
	$(BIN)/python deploy/kubernetes/render.py --check

# The plain Kubernetes manifests, rendered from the Helm chart (deploy/kubernetes/render.py).
manifests: $(STAMP)
	$(BIN)/python deploy/kubernetes/render.py

check: lint typecheck check-generated test test-slow

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis node_modules clients/node/dist clients/node/build
