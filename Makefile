# underway — developer commands. `make demo` and `make test` work on a fresh machine:
# each creates .venv and installs what it needs.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTHON ?= python3
PG      = UNDERWAY_TEST_PG="$$(scripts/ensure-postgres)"
# The queue intake tests use real brokers: started here when stopped (the tests fail, never
# skip, when none answers).
BROKERS = UNDERWAY_TEST_NATS="$$(scripts/ensure-nats)" UNDERWAY_TEST_AMQP="$$(scripts/ensure-rabbitmq)"
# The Docker backend is optional: when no engine can be started the Docker tests skip.
DOCKER  = UNDERWAY_TEST_DOCKER_IMAGE="$$(scripts/ensure-docker || true)"
# `make test` runs the suite in this many processes (pytest-xdist; each test has its own
# schema, files and ports). Its tests mostly wait on real processes, servers and timers,
# so three keep a 2-core machine busy, even one that others share; work stealing keeps
# every process busy to the end. `make test TEST_PROCS=0` runs it in one process.
TEST_PROCS ?= 3
PARALLEL = -n $(TEST_PROCS) --dist worksteal

.PHONY: demo test lint unit protocol crash bench bench-peers soak screenshots clean

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
	scripts/ensure-patroni
	scripts/ensure-spin
	scripts/ensure-pgbouncer
	$(PG) $(PY) scripts/tidy-postgres
	$(PG) $(BROKERS) $(DOCKER) $(PY) -m pytest -q -rs $(PARALLEL)

unit: $(STAMP)
	scripts/ensure-bwrap
	$(PY) -m pytest -q tests/unit

# The protocol's Promela model checked with Spin (docs/protocol.md).
protocol: $(STAMP)
	scripts/ensure-spin
	$(PY) -m pytest -q tests/integration/test_protocol_model.py

crash: $(STAMP)
	scripts/ensure-bwrap
	scripts/ensure-patroni
	scripts/ensure-pgbouncer
	$(PG) $(BROKERS) $(PY) -m pytest -q $(PARALLEL) tests/crash

soak: $(STAMP)
	scripts/ensure-bwrap
	scripts/ensure-pgbouncer
	$(PG) $(BROKERS) UNDERWAY_CRASH_KILLS=10000 $(PY) -m pytest -q tests/crash --timeout=0

bench: $(STAMP)
	scripts/ensure-bwrap
	$(PG) $(DOCKER) $(PY) bench/run.py

# underway against DBOS, LangGraph and Restate on the same databases (bench/README.md):
# the peers live in .venv-peers (scripts/ensure-peers); PEERS_ARGS="--reps 1" and the like
# are passed on to bench/peers.py.
bench-peers: $(STAMP)
	PYTHON=$(PYTHON) scripts/ensure-peers
	$(PG) $(PY) bench/peers.py $(PEERS_ARGS)

# The console's screenshots in docs/img, from its browser test.
screenshots: $(STAMP)
	scripts/console-screenshots

clean:
	rm -rf $(VENV) .venv-peers .mypy_cache .ruff_cache .pytest_cache .hypothesis
