"""PostgreSQL through a real PgBouncer in transaction pooling mode (``pooler=transaction``).

A run started from the CLI, served over the API and worked by a worker, every process
through PgBouncer. Two stores on two schemas share one server session (a pool of one)
and each sees only its own rows, and nothing of theirs is left in the session: no search
path, no prepared statement. LISTEN goes to ``listen_url``; without it the worker polls.
A store sent through PgBouncer without ``pooler=`` is refused with a message naming it,
before it leaves anything in a shared session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from fakes.pgbouncer import PgBouncer, throwaway_pgbouncer
from underway.client import Client
from underway.errors import ConfigurationError
from underway.store import connect
from underway.store._urls import parse_url, split_url
from underway.store.base import Store, Wakeups
from underway.store.streams import PollingBell

pytestmark = pytest.mark.postgres

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""How long a test waits for what must happen before calling it lost."""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(UNDERWAY), *args], capture_output=True, text=True,
                          timeout=PATIENCE_S, cwd=HERE)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(condition: Callable[[], bool], what: str, *procs: subprocess.Popen[bytes]) -> None:
    """Wait until ``condition`` holds; fail when the deadline passes or a process ends."""
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        for p in procs:
            assert p.poll() is None, f"a process ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within {PATIENCE_S} s"
        with contextlib.suppress(subprocess.TimeoutExpired):
            procs[0].wait(0.05)  # ends early if the process fails


@contextlib.contextmanager
def process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as errors:
        proc = subprocess.Popen([str(UNDERWAY), *args], cwd=HERE, stdout=subprocess.DEVNULL,
                                stderr=errors)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=PATIENCE_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_run_started_from_the_cli_is_served_and_worked_through_pgbouncer(
    pgbouncer_url: str, pgbouncer: PgBouncer, tmp_path: Path,
) -> None:
    url = pgbouncer_url
    assert cli("db", "migrate", "--db", url).returncode == 0
    made = cli("apikeys", "new", "--tenant", "default", "--role", "operator", "--db", url)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    port = free_port()

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        except httpx.TransportError:
            return False

    with process(["serve", "--db", url, "--port", str(port), "--log-level", "warning"],
                 tmp_path / "serve.log") as server, \
            process(["worker", "--db", url, "--app", "worker_app:app", "--poll", "0.1"],
                    tmp_path / "worker.log") as worker, \
            httpx.Client(base_url=f"http://127.0.0.1:{port}",
                         headers={"Authorization": f"Bearer {token}"}) as http:
        until(healthy, "/healthz", server, worker)
        started = cli("runs", "start", "job", "--input", '{"n": 2, "wait_signal": true}',
                      "--json", "--db", url)
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]

        def status() -> str:
            return str(http.get(f"/v1/runs/{run_id}").json()["status"])

        until(lambda: status() == "waiting", "the run waiting for its signal", server, worker)
        sent = http.post(f"/v1/runs/{run_id}/signals", json={"name": "go"})
        assert sent.status_code in (200, 201, 202), sent.text
        until(lambda: status() == "completed", "the run completed", server, worker)
        events = http.get(f"/v1/runs/{run_id}/events").json()
        events = events["events"] if isinstance(events, dict) else events
        [result] = [e["data"]["result"] for e in events if e["type"] == "RunCompleted"]
        assert result["total"] == 8  # 2 doubled, twice
        assert len(set(result["pids"])) == 1  # the one worker process ran both steps
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    shown = cli("runs", "show", run_id, "--db", url)
    assert shown.returncode == 0 and "completed" in shown.stdout
    verified = cli("audit", "verify", "--all", "--db", url)
    assert verified.returncode == 0, verified.stderr
    # Every process went through this PgBouncer: it logged their logins.
    assert pgbouncer.log().count("login attempt") > 0


@pytest.fixture
def single_session(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    """A PgBouncer of one server connection: every transaction shares one session."""
    with throwaway_pgbouncer(pgbouncer.server_url, pool_size=1) as bouncer:
        yield bouncer


def test_stores_on_two_schemas_share_one_session_and_leave_nothing_in_it(
    single_session: PgBouncer, pg_url: str, other_pg_url: str,
) -> None:
    one, two = (connect(single_session.route(u)) for u in (pg_url, other_pg_url))
    try:
        for store in (one, two):
            store.migrate()
        e1, e2 = Client(one), Client(two)
        # Interleaved, each many times (past psycopg's threshold for preparing).
        for i in range(8):
            e1.start("flow-a", {"i": i}, run_id=f"a{i}")
            e2.start("flow-b", {"i": i}, run_id=f"b{i}")
            assert one.get_run("default", f"a{i}") is not None
            assert two.get_run("default", f"a{i}") is None
        assert sorted(r.run_id for r in one.list_runs("default")) == [f"a{i}" for i in range(8)]
        assert sorted(r.run_id for r in two.list_runs("default")) == [f"b{i}" for i in range(8)]
    finally:
        one.close()
        two.close()
    # The one server session, as the next client finds it.
    with psycopg.connect(single_session.route(split_url(pg_url)[0]).split("?")[0],
                         autocommit=True, prepare_threshold=None) as raw:
        path = raw.execute("SELECT current_setting('search_path')").fetchone()
        prepared = raw.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
    assert path == ('"$user", public',)
    assert prepared == (0,)


def test_a_store_sent_through_pgbouncer_without_the_parameter_is_refused(
    pgbouncer_url: str,
) -> None:
    unnamed = pgbouncer_url.replace("&pooler=transaction", "")
    assert "pooler=" not in unnamed
    with pytest.raises(ConfigurationError, match="pooler=transaction"):
        connect(unnamed)
    done = cli("runs", "ls", "--db", unnamed)
    assert done.returncode == 2
    assert "pooler=transaction" in done.stderr and "Traceback" not in done.stderr


def test_listening_goes_to_listen_url_and_without_it_the_worker_polls(
    pgbouncer_url: str, pgbouncer_listen_url: str,
) -> None:
    polled, heard, writer = (connect(u) for u in (pgbouncer_url, pgbouncer_listen_url,
                                                   pgbouncer_url))
    try:
        writer.migrate()
        assert isinstance(polled.stream_bell(), PollingBell)
        assert not isinstance(heard.stream_bell(), PollingBell)
        nothing = polled.wakeups(name="polled")

        async def count() -> int:
            return len([_ async for _ in nothing.watch(None, retry=0.05)])

        assert asyncio.run(count()) == 0 and not nothing.listening
        asyncio.run(_hear_a_new_run(heard.wakeups(name="heard"), writer))
    finally:
        for s in (polled, heard, writer):
            s.close()


async def _hear_a_new_run(w: Wakeups, writer: Store) -> None:
    heard: asyncio.Queue[None] = asyncio.Queue()

    async def listen() -> None:
        async for _ in w.watch(None, retry=0.05):
            heard.put_nowait(None)

    task = asyncio.create_task(listen())
    try:
        await asyncio.wait_for(heard.get(), PATIENCE_S)  # listening started
        assert w.listening
        await asyncio.to_thread(Client(writer).start, "flow-c", {}, run_id="c1")
        await asyncio.wait_for(heard.get(), PATIENCE_S)  # NOTIFY passed PgBouncer
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_every_way_of_sending_a_statement_runs_on_the_schema(
    single_session: PgBouncer, pg_url: str,
) -> None:
    """A statement alone, in a transaction, in a pipeline (before and after a transaction
    inside it synced), many at once, a named cursor and COPY: each runs on the store's
    schema, or is refused where nothing could keep it there."""
    schema = parse_url(pg_url).schema
    here = "SELECT current_schema()"
    store = connect(single_session.route(pg_url))
    try:
        with store.pool.connection() as conn:
            assert conn.execute(here).fetchone() == (schema,)
            conn.execute("CREATE TABLE probe (x int)")
            with conn.transaction():
                assert conn.execute(here).fetchone() == (schema,)
                with conn.transaction():  # a savepoint
                    assert conn.execute(here).fetchone() == (schema,)
            with conn.pipeline():
                first = conn.execute(here)
                with conn.transaction():
                    inside = conn.execute(here)
                after = conn.execute(here)
                conn.cursor().executemany("INSERT INTO probe VALUES (%s)", [(1,), (2,)])
            assert [c.fetchone() for c in (first, inside, after)] == [(schema,)] * 3
            conn.cursor().executemany("INSERT INTO probe VALUES (%s)", [(3,), (4,)])
            assert conn.execute("SELECT count(*) FROM probe").fetchone() == (4,)
            # Neither runs in a pipeline: in a transaction, the path goes first on its own.
            with conn.transaction(), conn.cursor("named") as named:
                named.execute("SELECT x FROM probe ORDER BY x")
                assert [r[0] for r in named.fetchall()] == [1, 2, 3, 4]
            with conn.transaction(), conn.cursor().copy("COPY probe (x) FROM STDIN") as copy:
                copy.write_row((5,))
            # Outside one, or held past it, nothing could keep them on the schema.
            with pytest.raises(ConfigurationError, match="inside a transaction"), \
                    conn.cursor().copy("COPY probe (x) FROM STDIN"):
                pass
            with conn.transaction(), conn.cursor("held", withhold=True) as held, \
                    pytest.raises(ConfigurationError, match="WITH HOLD"):
                held.execute("SELECT 1")
    finally:
        store.close()
    with psycopg.connect(split_url(pg_url)[0], autocommit=True) as direct:
        rows = direct.execute(f'SELECT x FROM "{schema}".probe ORDER BY x').fetchall()
    assert rows == [(1,), (2,), (3,), (4,), (5,)]
