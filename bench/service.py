"""``underway serve`` under load: GET a run and POST a signal with ``CLIENTS`` concurrent
clients against a real uvicorn server, against a bare FastAPI endpoint on the same database
that reads one run row (``store.get_run``) and returns it — the least any HTTP read of a run
can cost. Both servers run in this process (uvicorn in threads); the clients run in a child
process (a thread and an httpx connection each, connected before timing starts), so their
CPU does not hold this process's interpreter lock.

A GET of a run through the API authenticates the key (one row), reads the run's row, folds
its state to say what it waits on, and appends an access-log entry (a durable write) before
it answers; a signal authenticates, reads the row, checks the flow's declared signals and
inserts the signal. Rounds alternate bare / GET / signal so load drift hits all three.

:func:`bench_startup` times ``underway serve`` from exec to its first ``/healthz`` answer,
against a minimal FastAPI app of one route started the same way (a fresh interpreter
running ``uvicorn.run``): what underway adds to the least a FastAPI server costs to start.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any
from uuid import uuid4

import httpx
from fastapi import FastAPI
from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway.apikeys import issue_key
from underway.runner import Runner
from underway.service import ServerThread, create_app
from underway.store.base import Store

CLIENTS = 50
PER_CLIENT = 20
RUNS = 50
ROUNDS = 3
TARGET = 3.0
STARTS = 7
"""Starts of each server for the start-up figure (interleaved, median)."""
STARTUP_TARGET_S = 1.0
MINIMAL_SERVER = """
import sys
import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
"""The start-up baseline: one route on uvicorn, as ``underway serve`` runs its app."""

class Pokes(BaseModel):
    n: int = 0


flow: uw.Flow[Pokes, Any] = uw.Flow("bench_waiter", state=Pokes, signals=["poke"])


@flow.step
async def wait(ctx: uw.RunContext[Pokes, Any]) -> Any:
    return ctx.wait("poke", then=wait)


def _bare(store: Store) -> FastAPI:
    app = FastAPI()

    @app.get("/bare/{run_id}")
    def bare(run_id: str) -> dict[str, Any]:
        row = store.get_run("bench", run_id)
        return {"run_id": run_id, "status": None if row is None else row.status}

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _load(url: str, method: str, paths: list[str], headers: dict[str, str],
          body: Any = None) -> tuple[list[float], float]:
    """Latencies of ``CLIENTS`` clients (a thread and a connection each) sending
    ``PER_CLIENT`` requests each, and the wall time of the whole load."""
    latencies: list[float] = []
    ready = threading.Barrier(CLIENTS + 1)

    def client(n: int) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=120.0) as http:
            http.get("/healthz")  # connect before the clock starts
            ready.wait()
            for i in range(PER_CLIENT):
                path = paths[(n * PER_CLIENT + i) % len(paths)]
                payload = None if body is None else {**body, "signal_id": f"{n}-{i}-{uuid4()}"}
                began = time.perf_counter()
                r = http.request(method, path, json=payload)
                latencies.append(time.perf_counter() - began)
                assert r.status_code < 300, r.text

    threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    ready.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - began


def _load_from_child(url: str, method: str, paths: list[str], headers: dict[str, str],
                     body: Any) -> tuple[list[float], float]:
    """:func:`_load` run in a child process: its latencies and wall time."""
    spec = json.dumps({"url": url, "method": method, "paths": paths, "headers": headers,
                       "body": body})
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], input=spec, text=True,
                         capture_output=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout)
    return list(result["latencies"]), float(result["wall"])


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _figures(url: str, db: str) -> list[Figure]:
    clock = uw.ManualClock(time.time())
    client = uw.Client.connect(url, clock=clock)
    engine = uw.Engine(client.store, flows=[flow], clock=clock)
    try:
        ids = [client.start(flow.name, None, tenant_id="bench")[0] for _ in range(RUNS)]
        asyncio.run(Runner(engine).run_until_idle())
        token = issue_key(client.store, tenant_id="bench", role="operator", name="bench",
                          now=clock.now()).token
        auth = {"Authorization": f"Bearer {token}"}
        samples: dict[str, list[tuple[float, float]]] = {"bare": [], "get": [], "signal": []}
        with ServerThread(_bare(client.store)) as bare, ServerThread(create_app(client)) as api:
            for _ in range(ROUNDS):
                for name, base, method, paths, body in (
                    ("bare", bare.url, "GET", [f"/bare/{r}" for r in ids], None),
                    ("get", api.url, "GET", [f"/v1/runs/{r}" for r in ids], None),
                    ("signal", api.url, "POST", [f"/v1/runs/{r}/signals" for r in ids],
                     {"name": "poke"}),
                ):
                    lat, wall = _load_from_child(base, method, paths, auth, body)
                    samples[name].append((_p99(lat), len(lat) / wall))
        p99 = {k: median([s[0] for s in v]) * 1e3 for k, v in samples.items()}
        rps = {k: median([s[1] for s in v]) for k, v in samples.items()}
    finally:
        client.close()
    note = f"{CLIENTS} clients x {PER_CLIENT} requests, median of {ROUNDS} rounds"
    figures = []
    for name, what in (("get", "get_run"), ("signal", "signal")):
        ratio = p99[name] / p99["bare"]
        figures.append(Figure(f"{db}.service_{what}_p99", p99[name], "ms", p99["bare"], ratio,
                              f"<= {TARGET:g}", ratio <= TARGET, note=note))
        figures.append(Figure(f"{db}.service_{what}_throughput", rps[name], "req/s",
                              rps["bare"], rps[name] / rps["bare"], "diagnostic"))
    return figures


def bench_sqlite() -> list[Figure]:
    """The API against the bare endpoint on SQLite."""
    with sqlite_dir() as d:
        return _figures(f"sqlite:///{d}/service.db", "sqlite")


def bench_postgres() -> list[Figure]:
    """The API against the bare endpoint on PostgreSQL."""
    with pg_schema() as (_, url):
        return _figures(url, "postgres")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _started(command: list[str], port: int) -> float:
    """Seconds from starting ``command`` until ``/healthz`` on ``port`` answers 200."""
    # Both servers use bytecode caches as Python does by default, whatever this shell says.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    began = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{command[:3]} exited with {proc.returncode}:\n"
                                   f"{proc.stderr.read().decode()[-3000:] if proc.stderr else ''}")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return time.perf_counter() - began
            except OSError:
                time.sleep(0.005)
            finally:
                conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _serve_command(url: str, port: int) -> list[str]:
    """``underway serve`` as a user runs it: the script installed beside this Python."""
    script = os.path.join(os.path.dirname(sys.executable), "underway")
    launcher = [script] if os.path.exists(script) else [
        sys.executable, "-c", "from underway.cli import main; main()"]
    return [*launcher, "serve", "--db", url, "--port", str(port), "--log-level", "warning"]


def bench_startup() -> list[Figure]:
    """``underway serve`` on SQLite (migrated, 50 waiting runs, a key) from exec to its
    first ``/healthz`` answer, against the minimal app; one warm-up start each."""
    with sqlite_dir() as d:
        url = f"sqlite:///{d}/serve.db"
        clock = uw.ManualClock(time.time())
        client = uw.Client.connect(url, clock=clock)
        engine = uw.Engine(client.store, flows=[flow], clock=clock)
        try:
            for _ in range(RUNS):
                client.start(flow.name, None, tenant_id="bench")
            asyncio.run(Runner(engine).run_until_idle())
            issue_key(client.store, tenant_id="bench", role="admin", name="bench",
                      now=clock.now())
        finally:
            client.close()
        minimal: list[float] = []
        serve: list[float] = []
        for i in range(STARTS + 1):
            port = _free_port()
            base = _started([sys.executable, "-c", MINIMAL_SERVER, str(port)], port)
            port = _free_port()
            full = _started(_serve_command(url, port), port)
            if i:  # the first start of each is a warm-up (bytecode caches, page cache)
                minimal.append(base)
                serve.append(full)
    value, baseline = median(serve), median(minimal)
    note = f"exec to the first /healthz answer, median of {STARTS} interleaved starts"
    return [
        Figure("sqlite.serve_startup", value, "s", baseline, value / baseline,
               f"value < {STARTUP_TARGET_S:g} s", value < STARTUP_TARGET_S, note=note),
        Figure("sqlite.serve_startup_added", value - baseline, "s",
               note="what underway adds to a minimal FastAPI server's start"),
    ]


if __name__ == "__main__":
    # The load generator's process: a JSON spec on stdin, latencies on stdout.
    args = json.loads(sys.stdin.read())
    lat, wall = _load(args["url"], args["method"], args["paths"], args["headers"],
                      args["body"])
    print(json.dumps({"latencies": lat, "wall": wall}))
