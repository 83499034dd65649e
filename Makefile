# One venv for everything; torch comes from the pinned CPU wheel (pip, never uv/poetry).
# `make run` installs what the service needs (.[all]); `make test` adds the test tools (.[all,dev]).
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-all
STAMP := $(VENV)/.installed

.PHONY: run test check lint openapi bench bench-ui bench-storage install fuzz opset releases releases-rules screenshots ui

# The web UI's one built file: the drawn graph's layout worker (elkjs bundled by esbuild, both
# from the npm registry at the versions app/ui/package-lock.json pins). Not in git: built here.
UI_BUNDLE := app/ui/build/layout-worker.js
$(UI_BUNDLE): app/ui/package.json app/ui/package-lock.json app/ui/worker/layout.js
	cd app/ui && npm ci --no-audit --no-fund && npm run build

ui: $(UI_BUNDLE)

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all]'
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(RUN_STAMP) $(UI_BUNDLE)
	$(BIN)/pt2serde serve

lint: $(STAMP)
	$(BIN)/ruff check pt2serde schema app tests bench
	$(BIN)/ruff format --check pt2serde schema app tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The 40 slowest tests are listed at the end, so that CI's output shows where the suite's time goes.
test: lint $(UI_BUNDLE)
	$(BIN)/pytest -q --durations=40

# The fast lane: lint and the tests that need no process besides pytest's own (no server, worker
# pool, browser, PostgreSQL or SeaweedFS) and are not heavy; tests/conftest.py marks them from
# the fixtures and helpers they use (docs/architecture.md, "Tests").
FAST_LANE := not (server or worker_pool or browser or postgres or s3 or heavy)
check: lint $(UI_BUNDLE)
	$(BIN)/pytest -q -m "$(FAST_LANE)"

# docs/ui.md's screenshots (tests/ui/screenshots/): rewritten only here, never by a test run.
screenshots: $(STAMP) $(UI_BUNDLE)
	PT2SERDE_SCREENSHOTS=tests/ui/screenshots $(BIN)/pytest -q tests/ui/test_ui.py tests/ui/test_drawn_graph.py tests/ui/test_diff_steps.py

openapi: $(STAMP)
	$(BIN)/python -m app.openapi > openapi.json

# Each torch release's rules (app/releases/data: operators, higher-order ops, Python targets,
# pytree types, weights_only globals, the schema version it writes, its reader probed), dumped by
# app/bridge/release_dump.py in each release's venv <RELEASES_DIR>/v<release> (torch only; `make
# releases` builds them), the pinned release's in this venv; schema/readers.py is rewritten from
# them. `make opset` rewrites only the pinned release's file, which
# tests/bridge/test_release_rules_current.py keeps equal to what this torch registers.
opset: $(STAMP)
	$(BIN)/python -m app.releases.generate 2.13.0

releases-rules: $(STAMP)
	$(BIN)/python -m app.releases.generate \
		--venvs $(RELEASES_DIR)

bench: $(STAMP)
	$(BIN)/python -m bench

# the web UI's rows alone (a browser on the 50k-node programs), put in place in bench/RESULTS.md
bench-ui: $(STAMP)
	$(BIN)/python -m bench --only ui

bench-storage: $(STAMP)
	$(BIN)/python -m bench --only storage

# Which torch release loads which program: a venv per release under RELEASES_DIR (made when
# missing: several GB each), real exports and loads in each, checked against our verdicts; writes
# tests/data/releases/, bench/RELEASES.md and docs/schema.md's table (bench/releases/run.py); exits 1
# when a verdict disagrees with a real load. About 4 minutes here once the venvs exist.
RELEASES_DIR ?= $(HOME)/.cache/pt2serde/releases
RELEASES_WORK ?= /tmp/pt2serde-releases
releases: $(STAMP)
	$(BIN)/python -m bench.releases --releases-dir $(RELEASES_DIR) --workdir $(RELEASES_WORK)

# A long campaign (SEED=, MUTANTS=, MINUTES= to change it); defective mutants are saved.
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --seed $(or $(SEED),$(shell date +%s)) \
		--mutants $(or $(MUTANTS),20000) --minutes $(or $(MINUTES),20) \
		--save /tmp/pt2serde-fuzz-defects
