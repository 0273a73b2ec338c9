"""Peers, measured by the project itself: underway, DBOS, LangGraph and Restate driving the
same shapes on the same databases, in one run, against the same floor.

    make bench-peers                        # sets up .venv-peers, then runs this
    .venv/bin/python bench/peers.py --reps 1 --cycles 1 --only underway,dbos

Each library runs in processes of its own (the peers in ``.venv-peers``, underway in
``.venv``), driven by ``bench/peer_workers/*_worker.py`` in each library's documented
durable form. The shapes: one run of 1,000 steps; 100 runs of 10 steps one after another;
100 runs of 10 steps all in flight at once; and a run of 1,000 steps whose process is
SIGKILLed on entering step 500, finished by a fresh process. Every step returns a
200-byte dict. The floor is one single-row INSERT + COMMIT on the same database (the
cheapest durable write it offers: ``throughput.py``'s floors), sampled just before and
just after every library's turn; repetitions are interleaved so that drift in the
machine's load hits every library and the floor alike. Writes ``bench/peers.json`` and
prints a table; see bench/README.md for exactly what is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import select
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from common import median, pg_base_url, pg_reachable, pg_schema, sqlite_dir
from peers_measure import (
    PostgresWatch,
    counting_syncs,
    database_url,
    sqlite_bytes,
    sqlite_journal_mode,
    strace_missing,
)
from peers_restate import RestateServer, server_binary
from peers_table import table
from throughput import PostgresFloor, SQLiteFloor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORKERS = os.path.join(HERE, "peer_workers")
RESULTS = os.path.join(HERE, "peers.json")
PEERS_VENV = os.path.join(ROOT, ".venv-peers")
LIBS = ("underway", "dbos", "langgraph", "restate")
PEER_PACKAGES = {
    "dbos": ("dbos", "sqlalchemy", "psycopg"),
    "langgraph": ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
                  "langgraph-checkpoint-postgres", "aiosqlite", "psycopg", "psycopg-pool"),
    "restate": ("restate-sdk", "hypercorn", "httpx"),
}
IMPORTS = {"dbos": "import dbos", "restate": "import restate, hypercorn, httpx",
           "langgraph": "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres, "
                        "aiosqlite"}


@dataclass(frozen=True)
class Shape:
    """Runs of steps, one after another or all at once."""

    name: str
    op: str
    runs: int
    steps: int

    @property
    def total(self) -> int:
        """Steps in the shape."""
        return self.runs * self.steps


SHAPES = (Shape("1x1000", "sequential", 1, 1000), Shape("100x10", "sequential", 100, 10),
          Shape("100_in_flight", "in_flight", 100, 10))
WARM_UP = (Shape("warm", "sequential", 1, 50), Shape("warm", "in_flight", 10, 5))
SYNC_SHAPES = (Shape("1x200", "sequential", 1, 200), Shape("20x10", "sequential", 20, 10))
KILL_STEPS, KILL_AT = 1_000, 500
ANSWER_TIMEOUT = 900.0
WORKER_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Every worker reads and writes bytecode caches, as Python does by default and as an
installed package has them (the peers' are compiled on install; the project's own modules,
installed editable, get theirs on first import)."""


class WorkerFailed(RuntimeError):
    """A worker process ended or answered otherwise than the protocol says."""


@dataclass
class Target:
    """One library on one database, and what was measured of it."""

    lib: str
    db: str
    floor: str
    python: str
    url: str
    bytes_now: Callable[[], int]
    pg: tuple[PostgresWatch, int] | None = None
    sync_pids: Callable[[int], list[int]] | None = None
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    syncs: dict[str, float] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def script(self) -> str:
        """The worker's script."""
        return os.path.join(WORKERS, f"{self.lib}_worker.py")


class Worker:
    """A worker process (see ``peer_workers/protocol.py``)."""

    def __init__(self, target: Target, mode: str, *args: str) -> None:
        self.target = target
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by close())
            "w+", prefix="peers-worker-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [target.python, target.script, target.db, target.url, mode, *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            cwd=WORKERS, env=WORKER_ENV)

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return int(self.proc.pid)

    def answer(self) -> dict[str, Any]:
        """The worker's next JSON line (it writes one line per command, and nothing else)."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], ANSWER_TIMEOUT)
        if not ready:
            self.proc.kill()
            raise WorkerFailed(f"{self.target.lib} on {self.target.db} did not answer in "
                               f"{ANSWER_TIMEOUT:.0f}s: {self.stderr_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=60)
            raise WorkerFailed(f"{self.target.lib} on {self.target.db} exited "
                               f"{self.proc.returncode}: {self.stderr_tail()}")
        got: dict[str, Any] = json.loads(line)
        return got

    def ask(self, shape: Shape) -> dict[str, Any]:
        """Run a shape; its answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": shape.op, "runs": shape.runs,
                                          "steps": shape.steps}) + "\n")
        self.proc.stdin.flush()
        return self.answer()

    def stderr_tail(self) -> str:
        """The end of what the worker wrote to stderr."""
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self) -> int:
        """Ask the worker to quit (if it serves) and wait for it; its exit code."""
        with contextlib.suppress(BrokenPipeError, ValueError):
            if self.proc.stdin is not None and self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
        try:
            code = self.proc.wait(timeout=ANSWER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)
        return int(code)


@contextlib.contextmanager
def serving(target: Target) -> Iterator[Worker]:
    """A serving worker, warmed up."""
    worker = Worker(target, "serve")
    try:
        if not worker.answer().get("ready"):
            raise WorkerFailed(f"{target.lib} on {target.db} did not say ready")
        for shape in WARM_UP:
            worker.ask(shape)
        yield worker
    finally:
        code = worker.close()
        if code != 0 and target.error is None:
            target.error = f"worker exited {code}"


# -- the three phases --------------------------------------------------------------------
def measure_shapes(target: Target, floors: Floors) -> None:
    """One repetition of the timed shapes, with bytes and commits around each, and the floor
    sampled just before and just after: each sample keeps the mean of the two."""
    before_floor = floors.sample(target.floor)
    got_samples: dict[str, dict[str, float]] = {}
    with serving(target) as worker:
        for shape in SHAPES:
            before = target.bytes_now()
            start = target.pg[0].position() if target.pg else ""
            got = worker.ask(shape)
            sample = {"seconds": float(got["seconds"]),
                      "bytes": float(target.bytes_now() - before)}
            if target.pg:
                watch, oid = target.pg
                work = watch.work(oid, start, watch.position())
                if work is not None:
                    sample.update(commits=work.commits, wal_bytes=work.wal_bytes)
            got_samples[shape.name] = sample
    floor = (before_floor + floors.sample(target.floor)) / 2
    for name, sample in got_samples.items():
        target.samples.setdefault(name, []).append({**sample, "floor_seconds": floor})


def count_syncs(target: Target) -> None:
    """fsync + fdatasync per step of the sequential shapes (an untimed pass under strace)."""
    assert target.sync_pids is not None
    with serving(target) as worker:
        for shape in SYNC_SHAPES:
            with counting_syncs(target.sync_pids(worker.pid)) as counts:
                worker.ask(shape)
            target.syncs[shape.name] = sum(counts.values()) / shape.total


def kill_and_resume(target: Target, cycle: int) -> None:
    """A run SIGKILLed on entering step KILL_AT, finished by a fresh process."""
    run_id = f"crash-{cycle}-{uuid.uuid4().hex[:8]}"
    crash = Worker(target, "crash", run_id, str(KILL_STEPS), str(KILL_AT))
    try:
        code = crash.proc.wait(timeout=ANSWER_TIMEOUT)
    except subprocess.TimeoutExpired:
        crash.proc.kill()
        raise
    finally:
        killed_at = time.monotonic()
        tail = crash.stderr_tail()
        crash.close()
    if code != -9:
        raise WorkerFailed(f"the crash process exited {code}, not by SIGKILL: {tail}")
    resume = Worker(target, "resume", run_id, str(KILL_STEPS))
    try:
        got = resume.answer()
    finally:
        code = resume.close()
    if code != 0:
        raise WorkerFailed(f"the resuming process exited {code}")
    ran = [int(i) for i in got["ran"]]
    target.resumes.append({
        "first_step_ms": (got["first_step"] - got["ready"]) * 1000,
        "kill_to_first_step_ms": (got["first_step"] - killed_at) * 1000,
        "first_step_cpu_ms": ((got["first_step_cpu"] - got["ready_cpu"]) * 1000
                              if got.get("first_step_cpu") is not None else None),
        "steps_rerun": sum(1 for i in ran if i < KILL_AT),
        "steps_run": len(ran),
        "complete": ran == list(range(KILL_AT, KILL_STEPS)) and got["result"] == KILL_STEPS,
        "version": got.get("version", ""),
    })


# -- set-up ------------------------------------------------------------------------------
def peers_python() -> str:
    """The peers' interpreter."""
    return os.path.join(PEERS_VENV, "bin", "python")


def unavailable(lib: str) -> str | None:
    """None when ``lib`` can be measured here, else why not."""
    if lib == "underway":
        return None
    for part in (lib, "restate-server") if lib == "restate" else (lib,):
        failed = os.path.join(PEERS_VENV, f"install-failed-{part}.log")
        if os.path.exists(failed):
            with open(failed, encoding="utf-8", errors="replace") as f:
                reason = f.readline().strip()  # scripts/ensure-peers puts it first
            return f"{part} could not be installed here: {reason or 'see ' + failed}"
    if not os.access(peers_python(), os.X_OK):
        return f"{PEERS_VENV} does not exist (run `make bench-peers`)"
    probe = subprocess.run([peers_python(), "-c", IMPORTS[lib]], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["?"])[-1]
        return f"not importable in .venv-peers: {last}"
    if lib == "restate":
        path, why = server_binary()
        if path is None:
            return why
    return None


def versions(libs: list[str]) -> dict[str, str]:
    """Installed versions of every package measured."""
    out: dict[str, str] = {}
    main = subprocess.run([sys.executable, "-c", "from importlib.metadata import version; "
                           "print(version('underway'))"], capture_output=True, text=True,
                          check=False)
    out["underway"] = main.stdout.strip()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False)
    if commit.returncode == 0:
        out["underway"] += f" (commit {commit.stdout.strip()})"
    wanted = sorted({p for lib in libs for p in PEER_PACKAGES.get(lib, ())})
    if wanted and os.access(peers_python(), os.X_OK):
        code = ("import json, importlib.metadata as m\nout = {}\n"
                f"for p in {wanted!r}:\n"
                "    try: out[p] = m.version(p)\n    except m.PackageNotFoundError: pass\n"
                "print(json.dumps(out))")
        got = subprocess.run([peers_python(), "-c", code], capture_output=True, text=True,
                             check=False)
        if got.returncode == 0:
            out.update(json.loads(got.stdout))
    return out


def sqlite_target(lib: str, folder: str) -> Target:
    """``lib`` on a SQLite file of its own in ``folder``."""
    path = os.path.join(folder, f"{lib}.sqlite")
    python = sys.executable if lib == "underway" else peers_python()
    return Target(lib, "sqlite", "sqlite", python, path, lambda: sqlite_bytes(path),
                  sync_pids=lambda pid: [pid])


def postgres_target(lib: str, watch: PostgresWatch) -> Target:
    """``lib`` on a fresh PostgreSQL database of its own."""
    name = watch.create(lib)
    python = sys.executable if lib == "underway" else peers_python()
    return Target(lib, "postgres", "postgres", python, database_url(watch.base, name),
                  lambda: watch.table_bytes(name), pg=(watch, watch.oid(name)))


def restate_target(server: RestateServer) -> Target:
    """The Restate SDK against the server (which keeps its own storage on local disk)."""
    return Target("restate", "restate", "sqlite", peers_python(), server.worker_url(),
                  server.stored_bytes, sync_pids=lambda pid: [pid, server.proc.pid])


# -- the run -----------------------------------------------------------------------------
class Floors:
    """The floor of each database, sampled just before and just after every library's turn."""

    def __init__(self, folder: str, pg_schema_name: str | None) -> None:
        self.floors: dict[str, Any] = {"sqlite": SQLiteFloor(os.path.join(folder, "floor.db"))}
        if pg_schema_name:
            self.floors["postgres"] = PostgresFloor(pg_schema_name)
        self.samples: dict[str, list[float]] = {db: [] for db in self.floors}
        for floor in self.floors.values():
            floor.seconds_per_commit(300)

    def sample(self, db: str) -> float:
        """Seconds per commit of 1,000 floor commits (kept, and returned)."""
        self.samples[db].append(self.floors[db].seconds_per_commit(1000))
        return self.samples[db][-1]

    def close(self) -> None:
        """Close the floors' connections."""
        for floor in self.floors.values():
            floor.close()


def _guarded(target: Target, what: str, fn: Callable[[], None]) -> None:
    if target.error:
        return
    try:
        fn()
    except (WorkerFailed, RuntimeError, subprocess.TimeoutExpired, OSError,
            psycopg.Error, json.JSONDecodeError) as exc:
        target.error = f"{what} failed: {exc}"
        print(f"  ! {target.lib} on {target.db}: {target.error}", flush=True)


def run(targets: list[Target], floors: Floors, reps: int, cycles: int) -> None:
    """Every phase, interleaved across the libraries."""
    why_no_strace = strace_missing()
    for rep in range(reps):
        shift = rep % max(len(targets), 1)
        for target in targets[shift:] + targets[:shift]:
            _progress(f"rep {rep + 1}/{reps}: {target.lib} on {target.db}")
            _guarded(target, "the timed shapes", lambda t=target: measure_shapes(t, floors))
    for target in targets:
        if target.sync_pids is None:
            continue
        if why_no_strace:
            target.notes.append(f"fsyncs not counted: {why_no_strace}")
            continue
        _progress(f"fsync count: {target.lib} on {target.db}")
        _guarded(target, "counting fsyncs", lambda t=target: count_syncs(t))
    for cycle in range(cycles):
        for target in targets:
            _progress(f"kill {cycle + 1}/{cycles}: {target.lib} on {target.db}")
            _guarded(target, "kill and resume",
                     lambda t=target, c=cycle: kill_and_resume(t, c))


def _progress(what: str) -> None:
    print(f"· {what}", flush=True)


def summarize(target: Target) -> dict[str, Any]:
    """The figures of one target, as written to ``peers.json``."""
    out: dict[str, Any] = {"measured": target.error is None, "notes": target.notes}
    if target.error:
        out["why"] = target.error
        return out
    shapes: dict[str, Any] = {}
    for shape in SHAPES:
        samples = target.samples[shape.name]
        per_step = [s["seconds"] / shape.total for s in samples]
        fig: dict[str, Any] = {
            "ms_per_step": median(per_step) * 1000,
            "ratio_to_floor": median([p / s["floor_seconds"]
                                      for p, s in zip(per_step, samples, strict=True)]),
            "steps_per_second": shape.total / median([s["seconds"] for s in samples]),
            "bytes_per_step": median([s["bytes"] / shape.total for s in samples]),
            "samples_ms_per_step": [round(p * 1000, 4) for p in per_step],
            "samples_floor_ms": [round(s["floor_seconds"] * 1000, 4) for s in samples],
        }
        if all("commits" in s for s in samples):
            fig["commits_per_step"] = median([s["commits"] / shape.total for s in samples])
            fig["wal_bytes_per_step"] = median([s["wal_bytes"] / shape.total for s in samples])
        shapes[shape.name] = fig
    out["shapes"] = shapes
    if target.syncs:
        out["fsyncs_per_step"] = target.syncs
    if target.resumes:
        out["kill_at_500_of_1000"] = {
            "first_resumed_step_ms": median([r["first_step_ms"] for r in target.resumes]),
            "kill_to_first_resumed_step_ms": median(
                [r["kill_to_first_step_ms"] for r in target.resumes]),
            "samples": target.resumes,
        }
    return out


def main() -> int:
    """Parse arguments, set up the databases and the Restate server, measure, report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated: " + ", ".join(LIBS))
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (default 3)")
    parser.add_argument("--cycles", type=int, default=3, help="kill cycles (default 3)")
    parser.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
    parser.add_argument("--out", default=RESULTS, help="where to write the JSON")
    args = parser.parse_args()
    libs = [lib for lib in args.only.split(",") if lib] or list(LIBS)
    if unknown := set(libs) - set(LIBS):
        parser.error(f"unknown libraries {sorted(unknown)}; choose from {list(LIBS)}")
    use_pg = not args.no_postgres
    if use_pg and (why := pg_reachable()):
        print(f"error: {why}\n(set UNDERWAY_TEST_PG, or pass --no-postgres)", file=sys.stderr)
        return 2
    missing = {lib: why for lib in libs if (why := unavailable(lib))}
    for lib, why in missing.items():
        print(f"NOT MEASURED: {lib}: {why}")
    present = [lib for lib in libs if lib not in missing]
    began = time.perf_counter()
    report: dict[str, Any] = {
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "machine": platform.machine(), "load_average": os.getloadavg()},
        "versions": versions(libs), "not_measured": missing,
        "settings": {"reps": args.reps, "kill_cycles": args.cycles, "result_bytes": 200,
                     "shapes": [s.__dict__ for s in SHAPES],
                     "kill": {"steps": KILL_STEPS, "at": KILL_AT}},
    }
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(sqlite_dir())
        schema = stack.enter_context(pg_schema())[0] if use_pg else None
        floors = Floors(folder, schema)
        stack.callback(floors.close)
        targets = [sqlite_target(lib, folder) for lib in present if lib != "restate"]
        report["databases"] = {"sqlite": {"version": sqlite3.sqlite_version,
                                          "folder_filesystem": _filesystem(folder)}}
        if use_pg:
            watch = PostgresWatch(pg_base_url())
            stack.callback(watch.close)
            pg_targets = [postgres_target(lib, watch) for lib in present if lib != "restate"]
            if watch.no_walinspect:
                for target in pg_targets:
                    target.notes.append(f"commits not counted: {watch.no_walinspect}")
            targets += pg_targets
            report["databases"]["postgres"] = _pg_facts()
        if "restate" in present:
            binary, _ = server_binary()
            assert binary is not None
            server = RestateServer(binary)
            stack.callback(server.close)
            report["versions"]["restate-server"] = server.version()
            targets.append(restate_target(server))
        if not targets:
            print("nothing to measure")
        print(f"peers: {', '.join(t.lib + '/' + t.db for t in targets)}; "
              f"{args.reps} reps, {args.cycles} kill cycles", flush=True)
        run(targets, floors, args.reps, args.cycles)
        for target in targets:
            if target.db == "sqlite" and os.path.exists(target.url):
                target.notes.append(f"journal_mode={sqlite_journal_mode(target.url)}")
        floor_s = {db: median(v) for db, v in floors.samples.items() if v}
        for db, s in floor_s.items():
            report["databases"][db].update(
                floor_ms_per_commit=s * 1000,
                floor_samples_ms=[round(v * 1000, 4) for v in floors.samples[db]])
        report["peers"] = {}
        for target in targets:
            report["peers"].setdefault(target.db, {})[target.lib] = summarize(target)
    report["seconds"] = round(time.perf_counter() - began, 1)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")
    print()
    print(table(report))
    print(f"\n{report['seconds']:.0f}s -> {args.out}")
    return 0


def _filesystem(path: str) -> str:
    got = subprocess.run(["df", "--output=fstype", path], capture_output=True, text=True,
                         check=False)
    return got.stdout.split()[-1] if got.returncode == 0 and got.stdout.split() else "?"


def _pg_facts() -> dict[str, Any]:
    with psycopg.connect(pg_base_url()) as conn:
        facts = {}
        for name in ("server_version", "synchronous_commit", "fsync", "wal_sync_method"):
            row = conn.execute(f"SHOW {name}").fetchone()
            facts[name] = str(row[0]) if row else "?"
    return facts


if __name__ == "__main__":
    sys.exit(main())
