# Two commands on a fresh machine: `make run` (the main job) and `make test` (the tests).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false

# mypy's paths, shown as the checkout's (`flows/cli.py:12`, not the editable link tree's)
SHELL := bash
.SHELLFLAGS := -o pipefail -c
LINK_TREE := build/__editable__.toolgrpo-0.1.0-py3-none-any/toolgrpo/

.PHONY: install link run test typecheck lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'setuptools>=68'
	# the CPU build on this machine's disk; an unpinned torch pulls a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]' --config-settings editable_mode=strict
	touch $(STAMP) $(VENV)/.linked

install: $(STAMP)

# The editable install links each module into the `toolgrpo` namespace (strict mode, so that
# editors and type checkers resolve `toolgrpo.*`); a module added since is linked here (~2-6 s),
# when a package folder changed (an entry added or removed changes its folder's time).
LINKED := $(VENV)/.linked
PACKAGE_DIRS := $(shell find flows tasks schemas common training validation evaluation mining reporting \
	ablation generator data -type d -not -name __pycache__)
$(LINKED): $(STAMP) $(PACKAGE_DIRS)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e . \
		--config-settings editable_mode=strict
	touch $(LINKED)

link: $(LINKED)

run: link
	$(BIN)/toolgrpo run --preset cpu

typecheck: link
	$(BIN)/lint-imports
	$(BIN)/mypy | sed 's#[^ ]*$(LINK_TREE)##'

test: typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/pytest -n auto --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) build .prefect .pytest_cache .ruff_cache .mypy_cache .hypothesis
