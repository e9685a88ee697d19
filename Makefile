# Two commands for a fresh machine (python3 and make present, nothing else):
#   make demo   create .venv, install, run the bot's main job on embedded defaults
#   make test   create .venv, install with test extras, run the whole suite
# and, for developers: make test-fast (slow tests deselected), make lint (what CI checks first)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint install clean bench screens

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/digestbot demo

test: $(STAMP)
	$(BIN)/python -m pytest

# The suite without the tests marked slow (crash, scale, corpora, memory), on every
# core: for every edit.  make test runs one process, as the timing-sensitive tests expect.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n auto

# Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade), formatting, strict types,
# and the size limits (CONTRIBUTING.md, Limits).
lint: $(STAMP)
	$(BIN)/ruff check bot tests bench .ci setup.py
	$(BIN)/ruff format --check bot tests bench .ci setup.py
	$(BIN)/mypy
	$(BIN)/python .ci/complexity.py bot

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

screens: demo
	$(BIN)/python bench/screens.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
