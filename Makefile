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

.PHONY: demo test test-fast lint install clean bench bench-check screens constraints docs

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

# The whole suite on every core, then the few tests that time a latency (marked timing)
# alone, so that no other test competes with them for the machine.
test: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python -m pytest -n auto -m "not timing"
	$(BIN)/python -m pytest -m timing

# For every edit: the suite on SQLite only (not PostgreSQL, even with DIGESTBOT_TEST_PG),
# without the tests marked slow (crash, scale, corpora, memory) or timing, on every core.
test-fast: $(STAMP) $(NODE_TOOLS)
	env -u DIGESTBOT_TEST_PG $(BIN)/python -m pytest -m "not slow and not timing" -n auto

# Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade), formatting, strict types,
# the package boundaries (no import cycle: pyproject.toml, tool.importlinter) and the
# size limits (CONTRIBUTING.md, Limits).
lint: $(STAMP)
	$(BIN)/ruff check bot tests bench docs .ci setup.py
	$(BIN)/ruff format --check bot tests bench docs .ci setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/complexity.py bot

# The configuration and CLI reference pages from the code, then the site (site/); a
# broken link or a page missing from mkdocs.yml fails it.
docs: $(STAMP)
	$(BIN)/python docs/reference.py
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

# The standing ratios against their budgets (bench/README.md, Budgets): a few minutes.
bench-check: $(STAMP)
	$(BIN)/python bench/check.py

screens: demo
	$(BIN)/python bench/screens.py

clean:
	rm -rf $(VENV) var site .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
