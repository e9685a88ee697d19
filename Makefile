# Two commands for a fresh machine (python3 and make present, nothing else):
#   make demo   create .venv, install, run the bot's main job on embedded defaults
#   make test   create .venv, install with test extras, run the whole suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean bench

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

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
