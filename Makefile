# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

# Bytecode is cached (__pycache__/, git-ignored) even where the environment
# turns that off (PYTHONDONTWRITEBYTECODE=1): otherwise every test worker,
# CLI call and service process compiles laneledger again, and pytest rewrites
# the asserts of every test module again (about 6 s of CPU per worker here).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run test test-fast test-programs mcp-inspector lint docs fault adversarial bench install clean sdk-ts sdk-ts-build

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/laneledger up --demo

# Chromium, prometheus, promtool, Go and golang.org/x/mod's sources come from
# Debian's packages, not pip.
# tests/external_programs.py looks each up on $PATH (as `command -v` does) and,
# only when one is missing, installs it with apt-get as root; otherwise the
# tests that need it skip, naming the install command.
test-programs:
	@$(PYTHON) tests/external_programs.py

# In parallel, four workers on the 2 cores measured here: while one test
# waits (on a server, a process, a timeout), another uses its core
# (docs/testing.md). Tests that must not overlap are grouped, and the slow
# ones start first, in tests/xdist_groups.py.
TEST_WORKERS ?= 4
# The tests' files (nats-server stores, SQLite files, logs) go to tmpfs where
# it has 8 GiB free: every JetStream write is fsynced (sync_interval: always),
# which on a disk costs the suite about 25 s of kernel CPU. Passing tests'
# directories are removed as they end (pyproject.toml), so it stays small.
# Set TMPDIR to choose another place.
TEST_TMPDIR ?= $(or $(TMPDIR),$(shell df --output=avail -k /dev/shm 2>/dev/null \
	| awk 'NR == 2 && $$1 >= 8388608 { print "/dev/shm" }'))
PYTEST_PARALLEL = TMPDIR=$(TEST_TMPDIR) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The MCP Inspector's CLI (npm registry, pinned with its lock file), for
# tests/test_mcp_inspector.py; without npm, or when the install fails, those
# tests skip, naming this target.
mcp-inspector:
	@if command -v npm >/dev/null; then \
		npm ci --prefix tests/mcp-inspector --no-audit --no-fund --loglevel=error \
		|| echo "mcp-inspector: npm ci failed; tests/test_mcp_inspector.py will skip"; \
	else echo "mcp-inspector: no npm (apt-get install npm); tests/test_mcp_inspector.py will skip"; fi

test: $(STAMP) test-programs sdk-ts mcp-inspector
	$(PYTEST_PARALLEL)

# The inner loop: every test that needs no nats-server and no browser.
test-fast: $(STAMP)
	$(PYTEST_PARALLEL) -m "not nats and not browser"

# Also the layers (laneledger.devtools.layers): no upward import, no cycle;
# the TypeScript SDK's type check and lint (sdk-ts: tsc, strict; ESLint);
# and the docs site.
lint: $(STAMP) sdk-ts docs
	$(BIN)/python -m laneledger.devtools.layers
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python bench/report.py --check

# The docs site (mkdocs.yml: docs/, spec/, the API reference from the
# docstrings, the settings tables from each service's settings), built
# strictly: a broken link or a warning fails. Into build/site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The TypeScript SDK (sdk-ts/): its npm packages exactly as package-lock.json
# pins them (npm ci, again only when the lock file changes), then tsc, which
# type-checks it (strict) and compiles the tests tests/test_sdk_ts.py runs,
# then ESLint (sdk-ts/eslint.config.js: the recommended rules).
# Without node and npm (tests/external_programs.py installs them as root)
# it says so and tests/test_sdk_ts.py skips.
SDK_TS_STAMP = sdk-ts/node_modules/.installed

sdk-ts:
	@if command -v node >/dev/null && command -v npm >/dev/null; then \
		$(MAKE) --no-print-directory sdk-ts-build; \
	else echo "no node/npm: the TypeScript SDK is not built; tests/test_sdk_ts.py skips"; fi

sdk-ts-build: $(SDK_TS_STAMP)
	cd sdk-ts && npx --no-install tsc -p tsconfig.json
	cd sdk-ts && npx --no-install eslint .

$(SDK_TS_STAMP): sdk-ts/package-lock.json
	cd sdk-ts && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The fault suite's long form (tests/fault/; `make test` runs its short form).
fault: $(STAMP)
	LANELEDGER_FAULT_LONG=1 $(BIN)/python -m pytest -q -s tests/fault

# The adversarial suite alone, on an otherwise idle machine, held to the
# 50 ms p99 of issue 34 (make test holds it to a 5 s regression guard).
adversarial: $(STAMP)
	LANELEDGER_ADVERSARIAL_P99_S=0.05 $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/test_adversarial.py

bench: $(STAMP)
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .laneledger .pytest_cache sdk-ts/node_modules sdk-ts/dist
