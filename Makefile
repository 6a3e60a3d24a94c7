# Every target creates .venv if missing and installs into it from the project's own files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_FLAGS := -q --disable-pip-version-check
# PyTorch (the `torch` extra, part of dev) is pinned in constraints.txt as torch==2.13.0, which
# resolves to the machine's CPU build. GPU users: make test TORCH_SPEC='torch==2.13.0+cu128'
TORCH_SPEC ?= torch==2.13.0

.PHONY: demo test test-reliability bench lint install install-demo install-dev install-bench clean help

help:
	@echo "make demo   - install and run the example end to end (embedded SQLite workspace)"
	@echo "make test   - install with dev extras and run the test suite"
	@echo "make bench  - run the benchmarks against peer tools; results in bench/results/"
	@echo "make lint   - ruff, mypy and the layer contracts"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(PIP_FLAGS) install --upgrade "pip>=24" wheel

$(VENV)/.stamp-core: $(PY) pyproject.toml constraints.txt
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e .
	@touch $@

$(VENV)/.stamp-demo: $(VENV)/.stamp-core
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[torch,serve]' '$(TORCH_SPEC)'
	@touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-core
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[dev]' '$(TORCH_SPEC)'
	@touch $@

$(VENV)/.stamp-bench: $(VENV)/.stamp-dev
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[dev,bench]'
	@touch $@

install: $(VENV)/.stamp-core
install-demo: $(VENV)/.stamp-demo
install-dev: $(VENV)/.stamp-dev
install-bench: $(VENV)/.stamp-bench

demo: install-demo
	$(PY) examples/demo.py

test: install-dev
	$(PY) -m pytest -q -m "not reliability" -p no:cacheprovider

test-reliability: install-dev
	$(PY) -m pytest -q -m reliability -p no:cacheprovider

bench: install-bench
	$(PY) bench/run.py

lint: install-dev
	$(PY) -m ruff check src tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
