# Two commands for a fresh machine (python3 and make present, nothing else):
#   make demo   create .venv, install, run the bot's main job on embedded defaults
#   make test   create .venv, install with test extras, run the whole suite
# and, for developers: make test-fast (slow tests deselected), make lint (what CI checks first)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint install clean bench

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

# The suite without the tests marked slow (crash, scale, corpora, memory): for every edit.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

# Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade), formatting and strict types.
lint: $(STAMP)
	$(BIN)/ruff check bot tests bench
	$(BIN)/ruff format --check bot tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
