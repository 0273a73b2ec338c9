"""``underway serve`` under load, as a user runs it: the server a process of its own (and with
``--workers 2``, three), against a bare FastAPI endpoint served the same way (uvicorn, the
same settings, a process of its own, and two processes sharing the port as ``--workers 2``
runs them) on the same database, in one run.

The load comes from :data:`LOADERS` processes of ``bench/api_load.py`` holding
:data:`CONNECTIONS` keep-alive connections between them, each sending its next request as
soon as the last is answered, for :data:`SECONDS` after a warm-up. Rounds alternate bare /
GET run / POST signal, then the same with two server processes, so load drift hits every
figure; each figure is the median of :data:`ROUNDS` rounds. Beside req/s, each round
records the server processes' CPU time per answered request (read from ``/proc``): unlike
req/s, it does not depend on how much of the machine other work leaves free.

A GET of a run through the API checks the key, reads the run's row and what it waits on,
and appends an access-log entry (durable) before it answers; a signal checks the key, reads
the run's row, checks the signal's name and inserts it (durable).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway.apikeys import issue_key
from underway.runner import Runner

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 50
CONNECTIONS = 50
LOADERS = 2
WARMUP = 0.5
SECONDS = 3.0
ROUNDS = 5
RPS_TARGET = 0.7
P99_TARGET = 3.0


class Pokes(BaseModel):
    n: int = 0


flow: uw.Flow[Pokes, Any] = uw.Flow("api_waiter", state=Pokes, signals=["poke"])


@flow.step
async def wait(ctx: uw.RunContext[Pokes, Any]) -> Any:
    return ctx.wait("poke", then=wait)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _underway() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "underway")
    return [script] if os.path.exists(script) else [
        sys.executable, "-c", "from underway.cli import main; main()"]


def _cpu(pid: int) -> float:
    """CPU seconds used by process ``pid`` and its children (a server's workers)."""
    pids, total = [pid], 0.0
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


_TICKS = os.sysconf("SC_CLK_TCK")


@contextmanager
def _server(command: list[str], port: int) -> Iterator[int]:
    """Run ``command`` (a server on ``port``) until ``/healthz`` answers; stop it after.
    Yields its process id."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"{command[:4]} exited with {proc.returncode}:\n{err[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{command[:4]} did not answer /healthz")
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Loaders:
    """The load generator processes, driven together."""

    def __init__(self, n: int) -> None:
        self.procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "api_load.py")],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for _ in range(n)]
        for p in self.procs:
            assert p.stdout is not None
            json.loads(p.stdout.readline())

    def load(self, port: int, method: str, paths: list[str], headers: dict[str, str],
             body: Any = None, server: int | None = None
             ) -> tuple[float, float, float, float]:
        """Requests per second, p99 seconds, the loaders' CPU share of the wall time, and
        the CPU seconds per answered request of the process ``server`` (and its
        children)."""
        cpu_before = _cpu(server) if server is not None else 0.0
        per = [CONNECTIONS // len(self.procs)] * len(self.procs)
        per[0] += CONNECTIONS - sum(per)
        for p, n in zip(self.procs, per, strict=True):
            assert p.stdin is not None
            p.stdin.write(json.dumps({
                "host": "127.0.0.1", "port": port, "method": method, "paths": paths,
                "headers": headers, "body": body, "connections": n, "warmup": WARMUP,
                "seconds": SECONDS}) + "\n")
            p.stdin.flush()
        results = []
        for p in self.procs:
            assert p.stdout is not None
            results.append(json.loads(p.stdout.readline()))
        server_cpu = _cpu(server) - cpu_before if server is not None else 0.0
        answered = sum(r["answered"] for r in results)
        failures = [f for r in results for f in r["failures"]]
        if failures:
            raise RuntimeError(f"requests failed: {failures}")
        latencies = sorted(x for r in results for x in r["latencies"])
        # None answered within the window: the p99 is longer than the window.
        p99 = (latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
               if latencies else float("inf"))
        cpu = sum(r["cpu"] for r in results) / (SECONDS + WARMUP)
        return len(latencies) / SECONDS, p99, cpu, server_cpu / max(answered, 1)

    def close(self) -> None:
        """End the processes."""
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=60)


def _prepare(url: str) -> tuple[list[str], str]:
    clock = uw.ManualClock(time.time())
    client = uw.Client.connect(url, clock=clock)
    try:
        engine = uw.Engine(client.store, flows=[flow], clock=clock)
        ids = [client.start(flow.name, None, tenant_id="bench")[0] for _ in range(RUNS)]
        asyncio.run(Runner(engine).run_until_idle())
        token = issue_key(client.store, tenant_id="bench", role="operator", name="bench",
                          now=clock.now()).token
    finally:
        client.close()
    return ids, token


def _figures(url: str, db: str) -> list[Figure]:
    ids, token = _prepare(url)
    auth = {"Authorization": f"Bearer {token}"}
    samples: dict[str, list[tuple[float, float, float, float]]] = {}
    ports = [_free_port() for _ in range(5)]
    serve = [*_underway(), "serve", "--db", url, "--log-level", "warning"]
    bare = [sys.executable, os.path.join(HERE, "api_bare.py"), url]
    # On SQLite, also the server with every read on the writer's connection (as before).
    single = [sys.executable, os.path.join(HERE, "api_one_connection.py"), "serve", "--db",
              url, "--log-level", "warning"]
    loaders = Loaders(LOADERS)
    try:
        with ExitStack() as stack:
            if db == "sqlite":
                shared = stack.enter_context(_server([*single, "--port", str(ports[4])],
                                                     ports[4]))
            bare_1 = stack.enter_context(_server([*bare, str(ports[0])], ports[0]))
            bare_2 = stack.enter_context(_server([*bare, str(ports[1]), "2"], ports[1]))
            one = stack.enter_context(_server([*serve, "--port", str(ports[2])], ports[2]))
            two = stack.enter_context(_server([*serve, "--port", str(ports[3]), "--workers",
                                               "2"], ports[3]))
            plan = []
            for tag, bare_pid, bare_port, pid, port in (("", bare_1, ports[0], one, ports[2]),
                                                        ("_2w", bare_2, ports[1], two, ports[3])):
                plan += [(f"bare{tag}", bare_pid, bare_port, "GET",
                          [f"/bare/{r}" for r in ids], None),
                         (f"get{tag}", pid, port, "GET", [f"/v1/runs/{r}" for r in ids], None),
                         (f"signal{tag}", pid, port, "POST",
                          [f"/v1/runs/{r}/signals" for r in ids], {"name": "poke"})]
            if db == "sqlite":
                plan.insert(2, ("get_writer", shared, ports[4], "GET",
                                [f"/v1/runs/{r}" for r in ids], None))
            # Each server warmed up first (a process's first requests import and build what
            # it serves lazily), then the measured rounds.
            for _name, pid, port, method, paths, body in plan:
                loaders.load(port, method, paths, auth, body, server=pid)
            for _ in range(ROUNDS):
                for name, pid, port, method, paths, body in plan:
                    samples.setdefault(name, []).append(
                        loaders.load(port, method, paths, auth, body, server=pid))
    finally:
        loaders.close()
    rps = {k: median([s[0] for s in v]) for k, v in samples.items()}
    p99 = {k: median([s[1] for s in v]) * 1e3 for k, v in samples.items()}
    cpu_each = {k: median([s[3] for s in v]) * 1e3 for k, v in samples.items()}
    cpu = max(s[2] for v in samples.values() for s in v)
    note = (f"{CONNECTIONS} connections from {LOADERS} load processes, {SECONDS:g} s a "
            f"round, median of {ROUNDS} interleaved rounds; the loaders used at most "
            f"{cpu:.0%} of a core")
    scaled = rps["bare_2w"] / rps["bare"]
    figures = [Figure(f"{db}.api_bare_2_workers", rps["bare_2w"], "req/s", rps["bare"], scaled,
                      "diagnostic: what a second process gives here",
                      note="the bare endpoint in two processes against one, same run")]
    for name, what in (("get", "get_run"), ("signal", "signal")):
        ratio = rps[name] / rps["bare"]
        figures.append(Figure(f"{db}.api_{what}_throughput", rps[name], "req/s", rps["bare"],
                              ratio, f">= {RPS_TARGET:g}", ratio >= RPS_TARGET, note=note))
        ratio = p99[name] / p99["bare"]
        figures.append(Figure(f"{db}.api_{what}_p99", p99[name], "ms", p99["bare"], ratio,
                              f"<= {P99_TARGET:g}", ratio <= P99_TARGET))
        figures.append(Figure(f"{db}.api_{what}_cpu", cpu_each[name], "ms/req",
                              cpu_each["bare"], cpu_each[name] / cpu_each["bare"],
                              "diagnostic", note="server CPU per answered request, "
                              "against the bare endpoint's"))
        two = f"{name}_2w"
        figures.append(Figure(f"{db}.api_{what}_2_workers", rps[two], "req/s", rps[name],
                              rps[two] / rps[name], "diagnostic (> 1: scales)",
                              note=f"--workers 2 against one worker, same run; the bare "
                              f"endpoint scaled {scaled:.2f}x"))
        figures.append(Figure(f"{db}.api_{what}_2_workers_cpu", cpu_each[two], "ms/req",
                              cpu_each[name], cpu_each[two] / cpu_each[name],
                              "diagnostic (about 1: a second process adds no work)",
                              note="server CPU per answered request with --workers 2, "
                              f"against one worker; the bare endpoint's: "
                              f"{cpu_each['bare_2w'] / cpu_each['bare']:.2f}x"))
        ratio = rps[two] / rps["bare_2w"]
        figures.append(Figure(f"{db}.api_{what}_throughput_2_workers", rps[two], "req/s",
                              rps["bare_2w"], ratio, f">= {RPS_TARGET:g}",
                              ratio >= RPS_TARGET,
                              note="--workers 2 against the bare endpoint in two processes"))
    if "get_writer" in rps:
        figures.append(Figure(f"{db}.api_get_run_read_connections", rps["get"], "req/s",
                              rps["get_writer"], rps["get"] / rps["get_writer"],
                              "diagnostic (> 1: faster)",
                              note="GET with reads on read-only connections, against every "
                              "read on the writer's connection (as before), same run"))
    return figures


def bench_sqlite() -> list[Figure]:
    """The API against the bare endpoint on SQLite."""
    with sqlite_dir() as d:
        return _figures(f"sqlite:///{d}/api.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """The API against the bare endpoint on PostgreSQL."""
    with pg_schema() as (_, url):
        return _figures(url, "postgres")
