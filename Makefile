# Two commands for a fresh machine (python3 and make present, nothing else):
#   make demo   create .venv, install, run the bot's main job on embedded defaults
#   make test   create .venv, install with test extras, run the whole suite
# and, for developers: make test-fast (slow tests deselected), make lint (what CI checks first)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Every dependency's version as CI installs it; make constraints refreshes it.
CONSTRAINTS := constraints.txt
# axe-core (accessibility) and the Nu HTML Checker for the browser tests, from npm; without
# npm those tests skip and say why.
NODE_TOOLS := $(VENV)/node/.installed

.PHONY: demo test test-fast lint install clean bench bench-check screens constraints

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

# The newest versions pyproject.toml allows, resolved in a clean virtualenv and pinned
# in constraints.txt (commit it once make test passes with them).
constraints:
	rm -rf .constraints-venv
	$(PYTHON) -m venv .constraints-venv
	.constraints-venv/bin/python -m pip install --quiet --upgrade pip
	.constraints-venv/bin/python -m pip install --quiet '.[test,postgres,taste]'
	{ echo "# make constraints writes this: every dependency as CI installs it (pip install -c)."; \
	  .constraints-venv/bin/python -m pip freeze --all --exclude-editable | grep -v -i -e '^digestbot' -e '^pip==' -e '^setuptools==' -e '^wheel=='; } > $(CONSTRAINTS)
	rm -rf .constraints-venv build

$(NODE_TOOLS): Makefile
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(VENV)/node && npm install --silent --no-audit --no-fund --prefix $(VENV)/node \
			axe-core@4.14.1 vnu-jar@26.9.27 && touch $@ \
		|| echo "npm could not install axe-core and vnu-jar: the checks that need them will be skipped"; \
	else echo "no npm here: the accessibility and HTML checks will be skipped"; fi

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/digestbot demo

test: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest

# The suite without the tests marked slow (crash, scale, corpora, memory), on every
# core: for every edit.  make test runs one process, as the timing-sensitive tests expect.
test-fast: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest -m "not slow" -n auto

# Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade), formatting, strict types,
# the package boundaries (no import cycle: pyproject.toml, tool.importlinter) and the
# size limits (CONTRIBUTING.md, Limits).
lint: $(STAMP)
	$(BIN)/ruff check bot tests bench .ci setup.py
	$(BIN)/ruff format --check bot tests bench .ci setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/complexity.py bot

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

# The standing ratios against their budgets (bench/README.md, Budgets): a few minutes.
bench-check: $(STAMP)
	$(BIN)/python bench/check.py

screens: demo
	$(BIN)/python bench/screens.py

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
