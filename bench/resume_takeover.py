"""Takeover in a fresh process, measured as ``make bench-peers`` measures its first resumed
step, against the least any takeover costs, in the same run.

A process of ``peer_workers/underway_worker.py`` (bench-peers' own worker) runs a flow of
1,000 steps and SIGKILLs itself on entering step 500. A fresh process of the same worker
notes the monotonic time once its imports are done, opens the store and resumes the run
with a :class:`underway.Runner`: the milliseconds from then to entering step 500 (the run
must then run steps 500 to 999 once each and complete).

The baseline, the floor of a takeover, is a fresh process of this file (``floor`` mode)
that notes the time once its imports are done (``sqlite3``, ``psycopg``), then connects to
the same database, reads one row and commits one insert: what any library's takeover does
at least (find where the run was, write that it is taken). When ``.venv-peers`` holds
LangGraph, its bench-peers worker is killed and resumed the same way, interleaved, and
underway's time is also compared with it; otherwise with LangGraph's figure recorded in
``bench/peers.json``.

Every process runs with bytecode caches, as Python writes them by default and as an
installed package has them.

    python resume_takeover.py floor DB URL     # the floor process (one JSON line)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "peer_workers")
PEERS_JSON = os.path.join(HERE, "peers.json")
PEERS_PYTHON = os.path.join(os.path.dirname(HERE), ".venv-peers", "bin", "python")
STEPS, KILL_AT = 1_000, 500
TIMEOUT = 300.0


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@dataclass
class Library:
    """One library's bench-peers worker on one database."""

    name: str
    python: str
    db: str
    url: str
    first_ms: list[float] = field(default_factory=list)
    kill_to_first_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    """The resuming process's CPU time (every thread's) over the same interval."""

    def _run(self, mode: str, *args: str) -> subprocess.CompletedProcess[str]:
        script = os.path.join(WORKERS, f"{self.name}_worker.py")
        return subprocess.run(
            [self.python, script, self.db, self.url, mode, *args], capture_output=True,
            text=True, timeout=TIMEOUT, check=False, cwd=WORKERS, env=_env())

    def kill_and_resume(self) -> None:
        """One run killed on entering step KILL_AT and finished by a fresh process."""
        run_id = f"takeover-{uuid.uuid4().hex[:10]}"
        crashed = self._run("crash", run_id, str(STEPS), str(KILL_AT))
        killed_at = time.monotonic()
        if crashed.returncode != -9:
            raise RuntimeError(f"{self.name}: the crash process exited {crashed.returncode}, "
                               f"not by SIGKILL: {crashed.stderr[-2000:]}")
        resumed = self._run("resume", run_id, str(STEPS))
        if resumed.returncode != 0:
            raise RuntimeError(f"{self.name}: the resuming process failed: "
                               f"{resumed.stderr[-2000:]}")
        got = json.loads(resumed.stdout.strip().splitlines()[-1])
        ran = [int(i) for i in got["ran"]]
        if ran != list(range(KILL_AT, STEPS)) or got["result"] != STEPS:
            raise RuntimeError(f"{self.name}: the resumed run ran {len(ran)} steps from "
                               f"{ran[:1]}, result {got['result']!r}")
        self.first_ms.append((got["first_step"] - got["ready"]) * 1000)
        self.kill_to_first_ms.append((got["first_step"] - killed_at) * 1000)
        if got.get("first_step_cpu") is not None:
            self.cpu_ms.append((got["first_step_cpu"] - got["ready_cpu"]) * 1000)


def floor_ms(db: str, url: str) -> float:
    """One fresh floor process: ms from its imports done to its insert committed."""
    done = subprocess.run([sys.executable, __file__, "floor", db, url], capture_output=True,
                          text=True, timeout=TIMEOUT, check=False, env=_env())
    if done.returncode != 0:
        raise RuntimeError(f"the floor process failed: {done.stderr[-2000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return (float(got["done"]) - float(got["ready"])) * 1000


def prepare_floor(db: str, url: str) -> None:
    """The floor's table, with one row to read."""
    ddl = "CREATE TABLE IF NOT EXISTS takeover_floor (id INTEGER PRIMARY KEY, body TEXT)"
    if db == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(ddl)
        conn.execute("INSERT OR IGNORE INTO takeover_floor VALUES (0, 'start')")
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(ddl.replace("INTEGER PRIMARY KEY", "BIGSERIAL PRIMARY KEY"))
        pg.execute("INSERT INTO takeover_floor VALUES (0, 'start') ON CONFLICT DO NOTHING")


def langgraph_available() -> bool:
    """Whether ``.venv-peers`` holds LangGraph with both of its checkpointers."""
    if not os.access(PEERS_PYTHON, os.X_OK):
        return False
    probe = subprocess.run(
        [PEERS_PYTHON, "-c", "import langgraph.checkpoint.sqlite, langgraph.checkpoint.postgres"],
        capture_output=True, check=False)
    return probe.returncode == 0


def recorded_langgraph_ms(db: str) -> float | None:
    """LangGraph's first resumed step as ``bench/peers.json`` recorded it."""
    try:
        with open(PEERS_JSON, encoding="utf-8") as f:
            peers = json.load(f)
        return float(peers["peers"][db]["langgraph"]["kill_at_500_of_1000"]
                     ["first_resumed_step_ms"])
    except (OSError, KeyError, TypeError, ValueError):
        return None


@contextmanager
def databases(db: str, names: list[str]) -> Iterator[dict[str, str]]:
    """A fresh SQLite file or PostgreSQL database for each name; removed afterwards."""
    if db == "sqlite":
        from common import sqlite_dir

        with sqlite_dir() as folder:
            yield {n: os.path.join(folder, f"{n}.sqlite") for n in names}
        return
    import psycopg

    from common import pg_base_url
    from peers_measure import database_url

    base = pg_base_url()
    made = {n: f"takeover_{n}_{uuid.uuid4().hex[:10]}" for n in names}
    with psycopg.connect(base, autocommit=True) as conn:
        for name in made.values():
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {n: database_url(base, name) for n, name in made.items()}
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            for name in made.values():
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Measured:
    """What one database's takeovers measured."""

    underway: Library
    floor_ms: list[float]
    langgraph: Library | None


def measure(db: str, cycles: int, *, python: str = sys.executable,
            with_langgraph: bool = True) -> Measured:
    """``cycles`` takeovers of underway, floors and (when installed) LangGraph, interleaved,
    after one untimed warm-up of each (which also migrates the fresh database)."""
    names = ["underway", "floor"] + (["langgraph"] if with_langgraph else [])
    with databases(db, names) as urls:
        underway = Library("underway", python, db, urls["underway"])
        langgraph = (Library("langgraph", PEERS_PYTHON, db, urls["langgraph"])
                     if with_langgraph else None)
        prepare_floor(db, urls["floor"])
        floors: list[float] = []
        for cycle in range(cycles + 1):
            underway.kill_and_resume()
            floors.append(floor_ms(db, urls["floor"]))
            if langgraph is not None:
                langgraph.kill_and_resume()
            if cycle == 0:  # the warm-up
                for lib in (underway, langgraph):
                    if lib is not None:
                        lib.first_ms.clear()
                        lib.kill_to_first_ms.clear()
                        lib.cpu_ms.clear()
                floors.clear()
        return Measured(underway, floors, langgraph)


def figures(db: str, cycles: int = 5) -> list[Any]:
    """The takeover figures of one database (see bench/README.md, Resume latency)."""
    from common import Figure, median

    lg_live = langgraph_available()
    got = measure(db, cycles, with_langgraph=lg_live)
    uw = got.underway
    ms, floor = median(uw.first_ms), median(got.floor_ms)
    out = [Figure(f"{db}.takeover_fresh_process", ms, "ms", floor, ms / floor,
                  "diagnostic", None,
                  note="bench-peers' first resumed step; baseline: connect, select, insert "
                       f"in a fresh process; runs: {_summary(uw.first_ms)}; floors: "
                       f"{_summary(got.floor_ms)}")]
    lg_ms: float | None
    if got.langgraph is not None:
        lg_ms, where = median(got.langgraph.first_ms), "LangGraph, measured in this run"
    else:
        lg_ms, where = recorded_langgraph_ms(db), "LangGraph, recorded in bench/peers.json"
    if lg_ms:  # neither measured nor recorded: no figure
        out.append(Figure(f"{db}.takeover_vs_langgraph", ms, "ms", lg_ms, ms / lg_ms,
                          "ratio <= 1", ms <= lg_ms, note=f"baseline: {where}"))
    lg_cpu = median(got.langgraph.cpu_ms) if got.langgraph and got.langgraph.cpu_ms else None
    cpu = median(uw.cpu_ms)
    out.append(Figure(f"{db}.takeover_fresh_process_cpu", cpu, "ms", lg_cpu,
                      None if lg_cpu is None else cpu / lg_cpu, "diagnostic", None,
                      note="CPU of the resuming process (every thread) over the same "
                           "interval" + ("; baseline: LangGraph's" if lg_cpu else "")))
    kill = median(uw.kill_to_first_ms)
    lg_kill = (median(got.langgraph.kill_to_first_ms) if got.langgraph is not None
               else None)
    out.append(Figure(f"{db}.takeover_kill_to_first_step", kill, "ms", lg_kill,
                      None if lg_kill is None else kill / lg_kill, "diagnostic", None,
                      note="from the kill to the first resumed step: the fresh process's "
                           "start and imports included" +
                           ("; baseline: LangGraph's" if lg_kill else "")))
    return out


def _floor_main(db: str, url: str) -> None:
    """The floor process: connect, read one row, commit one insert."""
    if db == "sqlite":
        import sqlite3

        ready = time.monotonic()
        conn = sqlite3.connect(url, isolation_level=None)
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("SELECT body FROM takeover_floor WHERE id = 0").fetchone()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO takeover_floor (body) VALUES ('taken')")
        conn.execute("COMMIT")
        done = time.monotonic()
        conn.close()
    else:
        import psycopg

        ready = time.monotonic()
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("SELECT body FROM takeover_floor WHERE id = 0").fetchone()
            pg.execute("INSERT INTO takeover_floor (body) VALUES ('taken')")
            done = time.monotonic()
    print(json.dumps({"ready": ready, "done": done}))


def _summary(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def main(argv: list[str]) -> Any:
    """``floor DB URL`` runs the floor process; ``compare DB CYCLES`` prints a quick look."""
    if argv[:1] == ["floor"]:
        return _floor_main(argv[1], argv[2])
    if argv[:1] == ["compare"]:
        from common import median

        got = measure(argv[1], int(argv[2]), with_langgraph=langgraph_available())
        for lib in (got.underway, got.langgraph):
            if lib is not None:
                print(f"{lib.name}: first step {median(lib.first_ms):.1f} ms "
                      f"({_summary(lib.first_ms)}); kill to first step "
                      f"{median(lib.kill_to_first_ms):.0f} ms")
        print(f"floor: {median(got.floor_ms):.1f} ms ({_summary(got.floor_ms)})")
        return None
    raise SystemExit("usage: resume_takeover.py floor DB URL | compare DB CYCLES")


if __name__ == "__main__":
    main(sys.argv[1:])
