# The two commands:  make demo  (set up, run the local job)   make test  (set up, pass the tests)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# what `make demo` needs: distlaunch and TensorFlow, not the test tools (`make test` adds them)
DEMO_STAMP := $(VENV)/.installed-demo
# the build backend's banner about editable installs says nothing a user can act on
PIP_INSTALL = PYTHONWARNINGS=ignore $(BIN)/python -m pip install -q

.PHONY: demo test sizes screenshot screenshots docs docs-serve docs-check lint typecheck unit integration container-image bench clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "make: need python3.11 (or python3 >= 3.11) on PATH"; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e '.[cpu,test]' --config-settings editable_mode=compat
	@# bytecode for our own modules, as a wheel install has it: every `distlaunch` command (and each
	@# completion) then starts without compiling them, also where PYTHONDONTWRITEBYTECODE is set
	$(BIN)/python -m compileall -q launcher tui
	@touch $@ $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e '.[cpu]' --config-settings editable_mode=compat
	$(BIN)/python -m compileall -q launcher tui
	@touch $@

## set up and run the embedded default job (cluster_profiles/local.toml) with the dashboard
demo: $(DEMO_STAMP)
	$(BIN)/distlaunch up cluster_profiles/local.toml

## set up, lint, type-check, build the docs strictly and run every test
test: $(STAMP) lint typecheck docs-check
	$(BIN)/python -m tests.runall

## the largest modules and classes: a report to read, never a gate (docs/contributing.md)
sizes: $(STAMP)
	$(BIN)/python -m tests.sizes

## redraw docs/dashboard.svg (README's picture): the real dashboard replaying docs/demo-run.events.jsonl
screenshot: $(STAMP)
	$(BIN)/python -m tui.screenshot

## redraw every picture of the docs (the README's, and each dashboard view in docs/img/) from docs' recordings
screenshots: $(STAMP)
	$(BIN)/python -m tui.screenshot --all

# the docs site (mkdocs.yml): the reference pages regenerated from the code, then built into site/
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

## regenerate docs/reference/ from the key table and the parser, build the site into site/
docs: $(STAMP)
	$(BIN)/python -m launcher.docsgen
	$(MKDOCS) build --strict

## the same, served on 127.0.0.1 (a port free at the time, printed) while you edit
docs-serve: $(STAMP)
	$(BIN)/python -m launcher.docsgen
	@# a port free now, never a fixed one another user could take first and serve their page on
	$(MKDOCS) serve --strict --dev-addr 127.0.0.1:$$($(BIN)/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

## what `make test` checks of the docs: the generated pages current, no broken link, no page outside the nav
docs-check: $(STAMP)
	$(BIN)/python -m launcher.docsgen --check
	$(MKDOCS) build --strict  # not --quiet: it hides the warnings --strict counts

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit tests/tui

integration: $(STAMP)
	$(BIN)/python -m pytest -q -ra tests/integration

## the container tests' Docker image (tests/containerimage.py): seconds when present, ~1 min cold, as root
container-image: $(STAMP)
	$(BIN)/python -m tests.containerimage

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
