"""Workers: real ``underway worker`` processes sharing SQLite and PostgreSQL, graceful
shutdown on SIGTERM, wake-ups by LISTEN/NOTIFY, and the ``Worker`` API in process (its
queues, its concurrency, queue limits, stopping, ``--app``) and the ``queues`` commands.

Waits below are bounded by generous timeouts so a broken worker fails the test instead of
hanging it; none of them asserts how fast anything happened (that is bench/'s job).
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner
from worker_app import jobs

from underway import ConfigurationError, Engine, Flow, RunContext, connect, tool
from underway import events as ev
from underway.cli import app as cli
from underway.flow import Next
from underway.journal import Journal
from underway.store import MemoryStore, QueueConfig, Store
from underway.store.postgres import split_url
from underway.worker import Worker, load_app

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""How long a test waits for something that should take well under a second: a guard
against hangs, never reached on a busy machine."""


def wait_until(done: Callable[[], bool], what: str, timeout: float = PATIENCE_S) -> None:
    """Poll ``done`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


# -- real worker processes ---------------------------------------------------------------------
class WorkerProcess:
    """An ``underway worker`` process; its stdout lines are read as they come."""

    def __init__(self, url: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(UNDERWAY), "worker", "--db", url, "--app", "worker_app:app", *args],
            cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.errors: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_errors(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, word: str, timeout: float = PATIENCE_S) -> str:
        """The next stdout line containing ``word``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.proc.kill()
                pytest.fail(f"worker {self.pid} printed no line with {word!r}; it printed "
                            f"{self.seen}; stderr:\n{self.stderr()}")
            self.seen.append(line)
            if word in line:
                return line

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> str:
        """SIGTERM the worker, wait for it to exit cleanly; return its summary line."""
        self.terminate()
        return self.finish()

    def finish(self) -> str:
        """Wait for the worker to exit cleanly; return its summary line."""
        try:
            self.proc.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"worker {self.pid} did not stop on SIGTERM:\n{self.stderr()}")
        assert self.proc.returncode == 0, self.stderr()
        return self.expect("stopped:")

    def stderr(self) -> str:
        return "".join(self.errors)[-4000:]

    def close(self) -> None:
        """Kill the worker if it still runs; release its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def spawn() -> Iterator[Callable[..., WorkerProcess]]:
    """Starts worker processes; kills any still running when the test ends."""
    started: list[WorkerProcess] = []

    def start(url: str, *args: str) -> WorkerProcess:
        w = WorkerProcess(url, *args)
        started.append(w)
        w.expect("ready")
        return w

    yield start
    for w in started:
        w.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh, migrated database of each kind."""
    fixture = "pg_url" if request.param == "postgres" else "sqlite_url"
    url: str = request.getfixturevalue(fixture)
    connect(url).close()
    return url


def steps_started(store: Store, run_id: str) -> Counter[str]:
    """How many times each step of the run started."""
    return Counter(
        r.event.step for r in Journal(store).history("default", run_id)
        if isinstance(r.event, ev.StepStarted)
    )


def drive(url: str, spawn: Callable[..., WorkerProcess], gates: Path, *, workers: int,
          runs: int) -> None:
    """``workers`` processes drive ``runs`` jobs (some napping on a timer) to completion."""
    store = connect(url)
    engine = Engine(store, flows=[jobs])
    concurrency = 8
    procs = [spawn(url, "--concurrency", str(concurrency), "--poll", "0.2")
             for _ in range(workers)]
    # The first runs hold their worker's slots at a gate until all of them are there: one
    # more than the other workers have slots, so every worker must have taken one, however
    # the machine schedules the workers.
    gated = concurrency * (workers - 1) + 1

    def job(i: int) -> dict[str, Any]:
        return {"n": i, "delay": 0.02, "nap": 0.05 if i % 3 == 0 else 0,
                "gate": str(gates) if i < gated else ""}

    ids = [engine.start(jobs, job(i))[0] for i in range(runs)]

    def at_the_gate() -> int:
        return len((gates / "started").read_text().split()) if (gates / "started").exists() \
            else 0

    wait_until(lambda: at_the_gate() == gated, f"{gated} runs to reach the gate")
    (gates / "open").touch()
    wait_until(
        lambda: all(r.status == "completed" for r in store.list_runs("default", limit=runs)),
        f"{runs} runs to complete",
    )
    summaries = [p.stop() for p in procs]
    assert sum(int(s.split("stopped: ")[1].split()[0]) for s in summaries) >= runs
    pids: Counter[int] = Counter()
    for i, run_id in enumerate(ids):
        state = engine.state(run_id)
        assert state.result is not None and state.result["total"] == 4 * i
        pids.update(state.result["pids"])
        # Nobody crashed, so no step ran twice, however the runs moved between workers.
        gate = {"gated": 1} if i < gated else {}
        assert steps_started(store, run_id) == {"begin": 1, **gate, "middle": 1, "end": 1}
    assert set(pids) == {p.pid for p in procs}, "every worker took part"
    assert {int(pid) for pid in (gates / "started").read_text().split()} == set(pids)
    audit = CliRunner().invoke(cli, ["--db", url, "audit", "verify", "--all"])
    assert audit.exit_code == 0, audit.output
    store.close()


def test_two_sqlite_worker_processes_drive_150_runs_to_completion(
    sqlite_url: str, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    connect(sqlite_url).close()
    drive(sqlite_url, spawn, tmp_path, workers=2, runs=150)


@pytest.mark.postgres
def test_four_postgres_worker_processes_drive_200_runs_to_completion(
    pg_url: str, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    connect(pg_url).close()
    drive(pg_url, spawn, tmp_path, workers=4, runs=200)


def test_sigterm_lets_the_step_in_flight_finish_and_hands_the_run_back(
    db_url: str, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    store = connect(db_url)
    engine = Engine(store, flows=[jobs])
    first = spawn(db_url, "--grace", "600")
    run_id, _ = engine.start(jobs, {"n": 1, "gate": str(tmp_path)})
    wait_until(lambda: (tmp_path / "started").exists(), "the gated step to start")

    first.terminate()
    first.expect("stopping: 1 runs in flight")
    (tmp_path / "open").touch()
    assert first.finish().endswith("0 activations, 1 runs handed back")
    # The gated step finished and committed; the run was handed back before the next one.
    state = engine.state(run_id)
    assert (state.status, state.step) == ("ready", "middle")
    row = store.get_run("default", run_id)
    assert row is not None and row.lease_owner is None

    second = spawn(db_url)
    wait_until(lambda: engine.state(run_id).status == "completed", "the second worker")
    second.stop()
    result = engine.state(run_id).result
    assert result is not None
    assert result["pids"] == [first.pid, first.pid, second.pid]
    assert steps_started(store, run_id) == {"begin": 1, "gated": 1, "middle": 1, "end": 1}
    store.close()


def test_after_the_grace_period_the_step_is_cancelled_and_another_worker_redoes_it(
    db_url: str, spawn: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    store = connect(db_url)
    engine = Engine(store, flows=[jobs])
    first = spawn(db_url, "--grace", "0.2")
    run_id, _ = engine.start(jobs, {"n": 1, "gate": str(tmp_path)})
    wait_until(lambda: (tmp_path / "started").exists(), "the gated step to start")

    assert first.stop().endswith("0 activations, 1 runs handed back")
    state = engine.state(run_id)
    assert (state.status, state.step) == ("ready", "gated")
    row = store.get_run("default", run_id)
    assert row is not None and row.lease_owner is None

    (tmp_path / "open").touch()
    second = spawn(db_url)
    wait_until(lambda: engine.state(run_id).status == "completed", "the second worker")
    second.stop()
    # The cancelled step committed nothing (not even that it started); the second worker
    # ran it from the start.
    result = engine.state(run_id).result
    assert result is not None and result["pids"] == [first.pid, second.pid, second.pid]
    assert (tmp_path / "started").read_text().split() == [str(first.pid), str(second.pid)]
    assert steps_started(store, run_id) == {"begin": 1, "gated": 1, "middle": 1, "end": 1}
    store.close()


@pytest.mark.postgres
def test_an_idle_postgres_worker_is_woken_by_new_runs_signals_and_its_own_timers(
    pg_url: str, spawn: Callable[..., WorkerProcess]
) -> None:
    """With a 10-minute poll, only a notification (a new run, a signal) or the next due
    time the worker computed (a timer) can make it act within the test's patience."""
    store = connect(pg_url)
    engine = Engine(store, flows=[jobs])
    worker = spawn(pg_url, "--poll", "600")

    started, _ = engine.start(jobs, {"n": 1})
    wait_until(lambda: engine.state(started).status == "completed", "a new run")

    napping, _ = engine.start(jobs, {"n": 2, "nap": 0.5})
    waiting, _ = engine.start(jobs, {"n": 3, "wait_signal": True})
    wait_until(lambda: engine.state(waiting).status == "waiting", "the run to wait")
    engine.signal(waiting, "go", None)
    wait_until(lambda: engine.state(waiting).status == "completed", "the signalled run")
    wait_until(lambda: engine.state(napping).status == "completed", "the timer")
    worker.stop()
    store.close()


@pytest.mark.postgres
def test_a_worker_whose_listening_connection_is_cut_reconnects_and_is_woken_again(
    pg_url: str, spawn: Callable[..., WorkerProcess]
) -> None:
    store = connect(pg_url)
    engine = Engine(store, flows=[jobs])
    worker = spawn(pg_url, "--poll", "600")
    owner = worker.seen[-1].split()[2]
    base, _ = split_url(pg_url)

    def listeners() -> list[int]:
        with psycopg.connect(base, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                (f"underway worker {owner}"[:63],),
            ).fetchall()
        return [r[0] for r in rows]

    [cut] = listeners()
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (cut,))
    wait_until(lambda: listeners() not in ([], [cut]), "the worker to listen again")
    run_id, _ = engine.start(jobs, {"n": 1})
    wait_until(lambda: engine.state(run_id).status == "completed", "the new run")
    worker.stop()
    store.close()


# -- the Worker API in process -------------------------------------------------------------
class Nothing(BaseModel):
    pass


class Held:
    """Holds every ``held`` tool call until opened; counts the calls in flight."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.now = 0
        self.most = 0
        self.by_queue: Counter[str] = Counter()
        self.most_by_queue: Counter[str] = Counter()


HELD = Held()


@tool(mutating=False, timeout=600)
async def held(args: Any) -> Any:
    q = args["queue"]
    HELD.now += 1
    HELD.by_queue[q] += 1
    HELD.most = max(HELD.most, HELD.now)
    HELD.most_by_queue[q] = max(HELD.most_by_queue[q], HELD.by_queue[q])
    try:
        await HELD.gate.wait()
    finally:
        HELD.now -= 1
        HELD.by_queue[q] -= 1
    return {}


class Where(BaseModel):
    queue: str = "default"


holding: Flow[Nothing, Where] = Flow("holding", state=Nothing, input=Where)


@holding.step
async def hold(ctx: RunContext[Nothing, Where]) -> Next:
    await ctx.call(held, {"queue": ctx.input.queue})
    return ctx.goto(after)


@holding.step
async def after(ctx: RunContext[Nothing, Where]) -> Next:
    return ctx.done(None)


@pytest.fixture
def engine() -> Iterator[Engine]:
    global HELD
    HELD = Held()
    store = MemoryStore()
    store.migrate()
    yield Engine(store, flows=[holding])


def start_runs(engine: Engine, count: int, queue: str = "default") -> list[str]:
    return [engine.start(holding, {"queue": queue}, queue=queue)[0] for _ in range(count)]


async def until(check: Callable[[], bool], what: str = "a condition") -> None:
    """Let the worker in this loop work until ``check`` holds (a hang fails the test)."""
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}")
        await asyncio.sleep(0.01)


async def settle(engine: Engine, run_ids: list[str], status: str = "completed") -> None:
    await until(lambda: all(engine.state(r).status == status for r in run_ids),
                f"runs to become {status}")


def test_a_worker_drives_at_most_its_concurrency_and_only_its_queues(engine: Engine) -> None:
    async def scenario() -> None:
        mine = start_runs(engine, 12, "mine")
        theirs = start_runs(engine, 3, "theirs")
        worker = Worker(engine, queues=["mine"], concurrency=5, poll=0.05)
        serving = asyncio.create_task(worker.run())
        await until(lambda: HELD.now == 5)
        assert worker.in_flight == 5
        HELD.gate.set()
        await settle(engine, mine)
        worker.stop()
        await serving
        assert HELD.most == 5
        assert {engine.state(r).status for r in theirs} == {"ready"}
        assert {engine.store.get_run("default", r).lease_token for r in theirs} == {0}  # type: ignore[union-attr]
        assert worker.activations == 12

    asyncio.run(scenario())


def test_workers_together_respect_a_queue_concurrency_limit(engine: Engine) -> None:
    engine.store.set_queue(QueueConfig("limited", max_concurrency=2))

    async def scenario() -> None:
        limited = start_runs(engine, 8, "limited")
        free = start_runs(engine, 4, "free")
        workers = [
            Worker(Engine(engine.store, flows=[holding], owner=f"w{i}"), concurrency=10,
                   poll=0.05)
            for i in range(3)
        ]
        serving = [asyncio.create_task(w.run()) for w in workers]
        await until(lambda: HELD.now == 6)
        assert (HELD.by_queue["limited"], HELD.by_queue["free"]) == (2, 4)
        HELD.gate.set()
        await settle(engine, limited + free)
        for w in workers:
            w.stop()
        await asyncio.gather(*serving)
        assert HELD.most_by_queue["limited"] == 2

    asyncio.run(scenario())


def test_stopping_lets_the_step_in_flight_finish_then_hands_the_run_back(
    engine: Engine,
) -> None:
    async def scenario() -> None:
        [run_id] = start_runs(engine, 1)
        worker = Worker(engine, poll=0.05, grace=600)
        serving = asyncio.create_task(worker.run())
        await until(lambda: HELD.now == 1)
        worker.stop()
        await asyncio.sleep(0.05)
        assert not serving.done()  # the step still runs: the worker waits for it
        HELD.gate.set()
        await serving
        assert worker.handed_back == 1 and worker.activations == 0
        state = engine.state(run_id)
        assert (state.status, state.step) == ("ready", "after")
        assert engine.store.get_run("default", run_id).lease_owner is None  # type: ignore[union-attr]
        # The worker put the engine's store back as it found it.
        assert type(engine.store) is MemoryStore

    asyncio.run(scenario())


def test_stopping_now_cancels_the_step_in_flight_and_hands_the_run_back(engine: Engine) -> None:
    async def scenario() -> None:
        [run_id] = start_runs(engine, 1)
        worker = Worker(engine, poll=0.05, grace=600)
        serving = asyncio.create_task(worker.run())
        await until(lambda: HELD.now == 1)
        worker.stop()
        worker.stop()  # a second stop does not wait for the grace period
        await serving
        assert HELD.now == 0 and worker.handed_back == 1
        state = engine.state(run_id)
        assert (state.status, state.step) == ("ready", "hold")
        HELD.gate.set()
        again = Worker(engine, poll=0.05)
        serving = asyncio.create_task(again.run())
        await settle(engine, [run_id])
        again.stop()
        await serving

    asyncio.run(scenario())


def test_one_engine_cannot_serve_two_running_workers(engine: Engine) -> None:
    async def scenario() -> None:
        first = Worker(engine, poll=0.05)
        serving = asyncio.create_task(first.run())
        await first.ready.wait()
        with pytest.raises(ConfigurationError, match="already driven by a running Worker"):
            await Worker(engine).run()
        first.stop()
        await serving

    asyncio.run(scenario())


@pytest.mark.parametrize("kwargs", [
    {"concurrency": 0}, {"poll": 0}, {"grace": -1}, {"queues": []}, {"queues": [""]},
])
def test_bad_worker_options_are_refused(engine: Engine, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Worker(engine, **kwargs)


# -- --app -----------------------------------------------------------------------------------
def test_app_names_a_flow_a_list_or_a_function() -> None:
    import worker_app

    assert load_app("worker_app:jobs") == ([worker_app.jobs], [])
    expected = ([worker_app.jobs], [worker_app.compute, worker_app.gate])
    assert load_app("worker_app:app") == expected
    assert load_app("worker_app:make_app") == expected


@pytest.mark.parametrize(("spec", "problem"), [
    ("worker_app", "must be module:attribute"),
    ("worker_app:", "must be module:attribute"),
    ("no_such_module:app", "no module named 'no_such_module'"),
    ("worker_app:nope", "worker_app has no attribute 'nope'"),
    ("worker_app:jobs.nope", "worker_app:jobs has no attribute 'nope'"),
    ("worker_app:Job", "is a ModelMetaclass"),
    ("worker_app:compute", "is a Tool"),
])
def test_a_bad_app_is_refused_naming_the_problem(spec: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        load_app(spec)


def test_an_app_without_flows_or_with_strangers_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import worker_app

    monkeypatch.setattr(worker_app, "only_tools", [worker_app.compute], raising=False)
    monkeypatch.setattr(worker_app, "stranger", [worker_app.jobs, 42], raising=False)
    with pytest.raises(ConfigurationError, match="names no Flow"):
        load_app("worker_app:only_tools")
    with pytest.raises(ConfigurationError, match="item 1 is a int"):
        load_app("worker_app:stranger")


def test_the_worker_command_reports_a_bad_app_and_an_old_schema(
    sqlite_url: str, tmp_path: Path
) -> None:
    connect(sqlite_url).close()
    bad = subprocess.run(
        [str(UNDERWAY), "worker", "--db", sqlite_url, "--app", "worker_app:nope"],
        cwd=HERE, capture_output=True, text=True, timeout=60, check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "underway: error: --app 'worker_app:nope': worker_app has no attribute 'nope'"
    )
    empty = f"sqlite:///{tmp_path}/empty.db"
    (tmp_path / "empty.db").touch()
    old = subprocess.run(
        [str(UNDERWAY), "worker", "--db", empty, "--app", "worker_app:app"],
        cwd=HERE, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    assert old.returncode == 1  # a runtime failure: the database, not the command, is wrong
    assert "run `underway db migrate` first" in old.stderr


# -- underway queues ---------------------------------------------------------------------------
def test_queue_limits_are_set_listed_and_removed_from_the_command_line(sqlite_url: str) -> None:
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(cli, ["--db", sqlite_url, "queues", *args])
        assert done.exit_code == 0, done.output
        return done.output

    connect(sqlite_url).close()
    assert run("ls") == "no queue has limits\n"
    assert run("set", "llm", "--max-concurrency", "4", "--rate", "10", "--per", "60",
               "--per-tenant") == (
        "queue 'llm': at most 4 leased at once, at most 10 started per 60s per tenant\n")
    run("set", "mail", "--rate", "5")
    assert run("ls").splitlines() == [
        "llm   at most 4 leased at once, at most 10 started per 60s per tenant",
        "mail  at most 5 started per 1s",
    ]
    assert '"max_concurrency": 4' in run("ls", "--json")
    assert run("rm", "llm") == "queue 'llm': no limits\n"
    gone = runner.invoke(cli, ["--db", sqlite_url, "queues", "rm", "llm"])
    assert (gone.exit_code, gone.output.strip()) == (
        2, "underway: error: queue 'llm' has no limits to remove")
    bad = runner.invoke(cli, ["--db", sqlite_url, "queues", "set", "q", "--per-tenant"])
    assert bad.exit_code == 2
    assert "per_tenant applies to a rate limit" in bad.output
    store = connect(sqlite_url)
    assert store.list_queues() == [QueueConfig("mail", rate_limit=5)]
    store.close()
