# One venv for everything; torch comes from the pinned CPU wheel (pip, never uv/poetry).
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint openapi bench install fuzz

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/pt2serde serve

lint: $(STAMP)
	$(BIN)/ruff check schema app tests bench
	$(BIN)/ruff format --check schema app tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q

openapi: $(STAMP)
	$(BIN)/python -m app.openapi > openapi.json

bench: $(STAMP)
	$(BIN)/python -m bench

# A long campaign (SEED=, MUTANTS=, MINUTES= to change it); defective mutants are saved.
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz --seed $(or $(SEED),$(shell date +%s)) \
		--mutants $(or $(MUTANTS),20000) --minutes $(or $(MINUTES),20) \
		--save /tmp/pt2serde-fuzz-defects
