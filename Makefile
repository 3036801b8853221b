# The two commands the README starts with: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test unit lint build install host-packages clean

$(BIN)/tfop: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,bench]'  # bench: the PNGs the benchmark smoke tests check
	touch $@

install: $(BIN)/tfop

## Debian packages of the real node (containerd, runc, CNI plugins, debootstrap): apt-get as root.
host-packages: install
	$(BIN)/python -m e2e.host_packages

## Build the local control plane (first time: minutes; cached after), run the demo.
demo: host-packages
	$(BIN)/python -m e2e.build
	$(BIN)/python -m e2e.demo

## The lint (ruff: pyproject.toml's rules, import order) and the type check (mypy) of tfop/.
lint: install
	$(BIN)/ruff check tfop
	$(BIN)/mypy tfop

## Unit tests and real-cluster tests together.
test: lint host-packages
	$(BIN)/python -m e2e.build
	$(BIN)/python -m pytest

## Only the pure tests (no cluster).
unit: lint
	$(BIN)/python -m pytest -m 'not cluster'

build: install
	$(BIN)/python -m e2e.build

clean:
	rm -rf $(VENV) build *.egg-info
