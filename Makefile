# underway — developer commands. `make demo` and `make test` work on a fresh machine:
# each creates .venv and installs what it needs.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTHON ?= python3
PG      = UNDERWAY_TEST_PG="$$(scripts/ensure-postgres)"
# The Docker backend is optional: when no engine can be started the Docker tests skip.
DOCKER  = UNDERWAY_TEST_DOCKER_IMAGE="$$(scripts/ensure-docker || true)"
# `make test` runs the suite in this many processes (pytest-xdist; each test has its own
# schema, files and ports). Its tests mostly wait on real processes, servers and timers,
# so three keep a 2-core machine busy, even one that others share; work stealing keeps
# every process busy to the end. `make test TEST_PROCS=0` runs it in one process.
TEST_PROCS ?= 3
PARALLEL = -n $(TEST_PROCS) --dist worksteal

.PHONY: demo test lint unit crash bench soak screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/collections_agent/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/mypy

test: lint
	scripts/ensure-bwrap
	scripts/ensure-chromium
	$(PG) $(DOCKER) $(PY) -m pytest -q -rs $(PARALLEL)

unit: $(STAMP)
	scripts/ensure-bwrap
	$(PY) -m pytest -q tests/unit

crash: $(STAMP)
	scripts/ensure-bwrap
	$(PG) $(PY) -m pytest -q $(PARALLEL) tests/crash

soak: $(STAMP)
	scripts/ensure-bwrap
	$(PG) UNDERWAY_CRASH_KILLS=10000 $(PY) -m pytest -q tests/crash --timeout=0

bench: $(STAMP)
	scripts/ensure-bwrap
	$(PG) $(DOCKER) $(PY) bench/run.py

# The console's screenshots in docs/img, from its browser test.
screenshots: $(STAMP)
	scripts/console-screenshots

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
