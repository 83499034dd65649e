# One venv for everything; torch comes from the pinned CPU wheel (pip, never uv/poetry).
# `make run` installs what the service needs (.[all]); `make test` adds the test tools (.[all,dev]).
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-all
STAMP := $(VENV)/.installed

.PHONY: run test lint openapi bench install fuzz opset

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

run: $(RUN_STAMP)
	$(BIN)/pt2serde serve

lint: $(STAMP)
	$(BIN)/ruff check schema app tests bench
	$(BIN)/ruff format --check schema app tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest -q

openapi: $(STAMP)
	$(BIN)/python -m app.openapi > openapi.json

# The operator registry and the weights_only pickle rules, written from the installed torch
# (tests/bridge/test_opset_current.py, tests/bridge/test_weights_only_current.py).
opset: $(STAMP)
	$(BIN)/python -m app.bridge.opset_dump app/programs/opset.json.gz
	$(BIN)/python -m app.bridge.weights_only_dump app/archive/weights_only_globals.json

bench: $(STAMP)
	$(BIN)/python -m bench

# A long campaign (SEED=, MUTANTS=, MINUTES= to change it); defective mutants are saved.
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --seed $(or $(SEED),$(shell date +%s)) \
		--mutants $(or $(MUTANTS),20000) --minutes $(or $(MINUTES),20) \
		--save /tmp/pt2serde-fuzz-defects
