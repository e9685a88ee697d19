# Two commands for a fresh machine (python3 and make present, nothing else):
#   make demo   create .venv, install the product, run the bot's main job on embedded defaults
#   make test   create .venv, install with test extras, run the whole suite
# and, for developers: make test-fast (slow tests deselected), make lint (what CI checks
# first), make format (what make lint's formatting and fixable rules ask for).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The product with its optional ranking (what make demo needs), and with the test tools.
PRODUCT := $(VENV)/.installed-product
STAMP := $(VENV)/.installed
# Every dependency's version as CI installs it; make constraints refreshes it.
CONSTRAINTS := constraints.txt
# axe-core (accessibility) and the Nu HTML Checker for the browser tests, from npm; without
# npm those tests skip and say why.  The stamp names the versions: a new one installs again,
# an edit elsewhere in this file does not.
AXE_CORE := axe-core@4.14.1
VNU_JAR := vnu-jar@26.9.27
NODE_TOOLS := $(VENV)/node/.installed-$(AXE_CORE)-$(VNU_JAR)
# A real Matrix homeserver for the channels' test, in a virtualenv of its own (its
# dependencies are not the product's); without it that test skips and says why.
SYNAPSE := matrix-synapse==1.163.2
SYNAPSE_TOOLS := $(VENV)/synapse/.installed-$(SYNAPSE)

.PHONY: demo test test-fast lint format install clean bench-input bench-check chaos flake-hunt soak soak-coverage screens constraints docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(PRODUCT): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) -e '.[taste]'
	touch $(PRODUCT)

# The test extra holds the product's (taste) too.
$(STAMP): pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --constraint $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP) $(PRODUCT)

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

$(NODE_TOOLS): | $(BIN)/python
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(VENV)/node && npm install --silent --no-audit --no-fund --prefix $(VENV)/node \
			$(AXE_CORE) $(VNU_JAR) && touch $@ \
		|| echo "npm could not install axe-core and vnu-jar: the checks that need them will be skipped"; \
	else echo "no npm here: the accessibility and HTML checks will be skipped"; fi

$(SYNAPSE_TOOLS): | $(BIN)/python
	@$(PYTHON) -m venv $(VENV)/synapse && $(VENV)/synapse/bin/python -m pip install --quiet '$(SYNAPSE)' && touch $@ \
		|| echo "pip could not install $(SYNAPSE): the test against a real Matrix homeserver will be skipped"

install: $(STAMP)

demo: $(PRODUCT)
	$(BIN)/digestbot demo

# The whole suite on every core.  No test asserts a latency (docs/testing.md, Time in
# tests): those marked timing assert an order that holds beside any other test.
test: $(STAMP) $(NODE_TOOLS) $(SYNAPSE_TOOLS)
	$(BIN)/python -m pytest -n auto

# For every edit: the suite on SQLite only (not PostgreSQL, even with DIGESTBOT_TEST_PG),
# without the tests marked slow (crash, scale, corpora, memory) or timing, on every core.
test-fast: $(STAMP) $(NODE_TOOLS)
	env -u DIGESTBOT_TEST_PG $(BIN)/python -m pytest -m "not slow and not timing" -n auto

# Lint (pyflakes, pycodestyle, isort, bugbear, pyupgrade), formatting, strict types,
# the package boundaries (no import cycle: pyproject.toml, tool.importlinter) and the
# size limits (CONTRIBUTING.md, Limits).
lint: $(STAMP)
	$(BIN)/ruff check bot tests bench docs examples .ci setup.py
	$(BIN)/ruff format --check bot tests bench docs examples .ci setup.py
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python .ci/complexity.py bot

format: $(STAMP)
	$(BIN)/ruff check --fix bot tests bench docs examples .ci setup.py
	$(BIN)/ruff format bot tests bench docs examples .ci setup.py

# The configuration and CLI reference pages from the code, then the site (site/); a
# broken link or a page missing from mkdocs.yml fails it.
docs: $(STAMP)
	$(BIN)/python docs/reference.py
	$(BIN)/mkdocs build --strict

# The readers of outside input at full size: a dump's ingest and a CSV import (bench/README.md).
bench-input: $(STAMP)
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/import_csv.py

# The standing ratios against their budgets (bench/README.md, Budgets): a few minutes.
bench-check: $(STAMP)
	$(BIN)/python bench/check.py

# The fault harness (bench/chaos.py): the daemon (scheduler, workers, serve) on SQLite and,
# with DIGESTBOT_TEST_PG, on PostgreSQL, against a relay that rate-limits, stalls, refuses
# and drops; readers leaving and a worker killed meanwhile; rows a restore might bring.
# Prints its counts and the seed that replays it; exit 1 when a promise broke.
chaos: $(STAMP)
	$(BIN)/python bench/chaos.py

# The tests most exposed to chance (daemons, browsers, PostgreSQL, the timing tier), RUNS
# times beside a CPU hog taking one core; prints each test that failed and how often.
RUNS ?= 3
flake-hunt: $(STAMP) $(NODE_TOOLS)
	$(BIN)/python .ci/flake_hunt.py --runs $(RUNS)

# The heavy tests (marked soak) at the sizes they were written for, printing their figures:
# kills while sending, workers and planners on PostgreSQL, open days and cadences planned
# every minute and hour (docs/testing.md, The heavy tests).  soak-coverage prints what they
# reach at full size and not at the suite's.
soak: $(STAMP)
	DIGESTBOT_SOAK=1 $(BIN)/python -m pytest -m soak -s -p no:randomly

soak-coverage: $(STAMP)
	$(BIN)/python .ci/soak_coverage.py

screens: demo
	$(BIN)/python bench/screens.py

# Never var/: it holds the default store and the signing key, whose loss breaks every
# link already mailed.
clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis .mypy_cache .ruff_cache build dist
