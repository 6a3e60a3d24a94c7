# Every target creates .venv if missing and installs into it from the project's own files.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_FLAGS := -q --disable-pip-version-check
# PyTorch (the `torch` extra, part of dev) is pinned in constraints.txt as torch==2.13.0, which
# resolves to the machine's CPU build. GPU users: make test TORCH_SPEC='torch==2.13.0+cu128'
TORCH_SPEC ?= torch==2.13.0

# make test-floors: the core dependencies at the lowest versions pyproject.toml allows
# (constraints-floors.txt), in a venv of their own, against the tests of the layers using them.
FLOORS_VENV ?= .venv-floors
FLOORS_PY := $(FLOORS_VENV)/bin/python
# (evaluate: scikit-learn, scipy, numpy, plotly, and typer/rich by its CLI tests; data:
# pyarrow, pandas, pandera, fsspec; registry: skops, SQLAlchemy, alembic; tune: optuna, cmaes)
FLOORS_TESTS ?= tests/evaluate tests/data tests/registry/test_registry.py tests/tune/test_tune.py \
	tests/test_floors.py
# Deprecation notices that old releases give about their newer neighbours are not failures:
# older typer imports click.utils.get_binary_stream/get_text_stream (deprecated in click 8.5);
# scikit-learn 1.7.0 passes L-BFGS-B options that scipy 1.16 deprecates.
FLOORS_WARNINGS := -W "ignore:'click.utils.:DeprecationWarning" \
	-W "ignore:scipy.optimize:DeprecationWarning"

.PHONY: browser demo demo-loop demo-scale test test-floors test-reliability bench lint install install-demo install-dev \
	install-bench clean help

help:
	@echo "make demo   - install and run the example end to end (embedded SQLite workspace)"
	@echo "make demo-loop - drift on served traffic -> alarm -> retrain -> canary -> promotion"
	@echo "make demo-scale - the pipeline on a local Ray cluster, S3 (moto) and PostgreSQL, verified"
	@echo "make test   - install with dev extras and run the test suite"
	@echo "make test-floors - tests at the lowest versions of the core dependencies allowed"
	@echo "make bench  - run the benchmarks against peer tools; results in bench/results/"
	@echo "make lint   - ruff, mypy and the layer contracts"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) $(PIP_FLAGS) install --upgrade "pip>=24" wheel

$(VENV)/.stamp-core: $(PY) pyproject.toml constraints.txt
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e .
	@touch $@

# onnx: the demo optimises its model to an ONNX graph and serves it with --runtime onnx
$(VENV)/.stamp-demo: $(VENV)/.stamp-core Makefile
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[torch,serve,onnx]' '$(TORCH_SPEC)'
	@touch $@

$(VENV)/.stamp-dev: $(VENV)/.stamp-core
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[dev]' '$(TORCH_SPEC)'
	$(MAKE) --no-print-directory browser
	@touch $@

# The dashboard's browser tests drive Debian's chromium (Playwright's own browser download
# cannot be used offline). Installed with apt when missing and this is root; otherwise
# those tests are skipped with a message saying what to install (and fail under CI=true).
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium for the dashboard's browser tests (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
			>/dev/null; \
	else echo "note: $(CHROMIUM) is missing: the dashboard's browser tests will be skipped" \
		"(install Debian's chromium package)"; fi

$(VENV)/.stamp-bench: $(VENV)/.stamp-dev
	$(PIP) $(PIP_FLAGS) install -c constraints.txt -e '.[dev,bench]'
	@touch $@

install: $(VENV)/.stamp-core
install-demo: $(VENV)/.stamp-demo
install-dev: $(VENV)/.stamp-dev
install-bench: $(VENV)/.stamp-bench

demo: install-demo
	$(PY) examples/demo.py

demo-loop: install-demo
	$(PY) examples/demo_loop.py

# needs the dev extra (ray, s3fs, moto, psycopg) and the PostgreSQL server (REPRISE_DEMO_PG)
demo-scale: install-dev
	$(PY) examples/demo_scale.py

# make test runs the suite in TEST_WORKERS processes (pytest-xdist), whole files to a worker
# so that a module's fixtures (servers, trained models) are built once; TEST_WORKERS=0 runs
# it in this process. Most tests wait on subprocesses and servers: two workers suit 2 cores.
TEST_WORKERS ?= 2

test: install-dev
	$(PY) -m pytest -q -m "not reliability" -p no:cacheprovider --durations=30 \
		-n $(TEST_WORKERS) --dist loadfile

constraints-floors.txt: pyproject.toml .ci/floors.py
	$(PYTHON) .ci/floors.py --write

# Wheels only: a floor without a wheel for this Python is not a floor anyone can install.
# The test tools come at the versions constraints.txt pins.
$(FLOORS_VENV)/.stamp: pyproject.toml constraints-floors.txt constraints.txt
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_PY) -m pip $(PIP_FLAGS) install --upgrade "pip>=24" wheel
	$(FLOORS_PY) -m pip $(PIP_FLAGS) install --only-binary :all: -c constraints-floors.txt -e . \
		$$(grep -E '^(pytest|pytest-timeout|hypothesis)==' constraints.txt)
	$(FLOORS_PY) .ci/floors.py --verify
	@touch $@

test-floors: $(FLOORS_VENV)/.stamp
	$(FLOORS_PY) -m pytest -q -p no:cacheprovider -m "not reliability and not postgres" \
		$(FLOORS_WARNINGS) $(FLOORS_TESTS)

test-reliability: install-dev
	$(PY) -m pytest -q -m reliability -p no:cacheprovider

bench: install-bench
	$(PY) bench/run.py

lint: install-dev
	$(PY) -m ruff check src tests bench examples
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) $(FLOORS_VENV) build dist src/*.egg-info .pytest_cache .mypy_cache \
		.ruff_cache
