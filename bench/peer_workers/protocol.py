"""What every peer worker shares: the step's result, the step clock, and the command loop.

A worker is one library driving the benchmark's shapes on one database. It runs in a
process of its own (the peers' virtual environment for DBOS, LangGraph and Restate, the
project's for underway) and is started in one of three modes:

``serve``
    prints ``{"ready": true}``, then answers JSON commands read one a line from stdin —
    ``{"op": "sequential", "runs": R, "steps": S}`` (R runs of S steps, one after another),
    ``{"op": "in_flight", "runs": R, "steps": S}`` (R runs of S steps, all started at once),
    ``{"op": "quit"}`` — with one JSON line each: the seconds the shape took;
``crash RUN_ID STEPS KILL_AT``
    starts run RUN_ID of STEPS steps; the step numbered KILL_AT (counted from 0, so KILL_AT
    steps have completed before it) SIGKILLs its own process on entry;
``resume RUN_ID STEPS``
    a fresh process that finishes the killed run the library's documented way, and prints
    one JSON line: the monotonic time its imports were done (``ready``), the time the first
    step it ran was entered (``first_step``), which steps it ran, and the run's result;
    ``ready_cpu`` and ``first_step_cpu`` are the process's CPU time (every thread's) at
    those two moments.

Only the standard library is imported here: the module runs in both environments.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

RESULT_BYTES = 200
"""Size of every step's result, as compact JSON."""


def step_result(run_id: str, i: int) -> dict[str, Any]:
    """The ~200-byte dict every step of every library returns (its JSON is exactly
    :data:`RESULT_BYTES` bytes for the benchmark's run ids and step numbers). The data is
    hashed from the run and step, so it reads as random bytes to a compressor."""
    head = {"run": run_id[-12:], "step": i, "status": "ok", "data": ""}
    room = RESULT_BYTES - len(json.dumps(head, separators=(",", ":")))
    seed = hashlib.sha512(f"{run_id}:{i}".encode()).digest()
    data = base64.b64encode(seed * 4).decode()[: max(room, 0)]
    return {**head, "data": data}


@dataclass
class StepClock:
    """What the steps of this process did: when the first one was entered and which ran.

    ``kill_at`` arms the crash: the step with that number SIGKILLs the process on entry."""

    kill_at: int | None = None
    first_at: float | None = None
    first_cpu: float | None = None
    """The process's CPU time (every thread's) when the first step was entered."""
    ran: list[int] = field(default_factory=list)

    def enter(self, i: int) -> None:
        """Called first thing in every step, with the step's number."""
        if self.first_at is None:
            self.first_at = time.monotonic()
            self.first_cpu = time.process_time()
        if i == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        self.ran.append(i)


CLOCK = StepClock()
"""This process's step clock (a worker has one)."""


class Peer(Protocol):
    """One library's driver of the benchmark's shapes on one database."""

    def sequential(self, runs: int, steps: int) -> None:
        """``runs`` runs of ``steps`` steps, one after another, each to its end."""

    def in_flight(self, runs: int, steps: int) -> None:
        """``runs`` runs of ``steps`` steps, all started at once, each to its end."""

    def crash(self, run_id: str, steps: int) -> None:
        """Start ``run_id`` and drive it (a step kills the process on the way)."""

    def resume(self, run_id: str, steps: int) -> Any:
        """Finish the killed ``run_id`` in this fresh process; return its result."""

    def close(self) -> None:
        """Release the database and anything running in the background."""


_ANSWERS: list[Any] = []


def _reply(obj: dict[str, Any]) -> None:
    out = _ANSWERS[0] if _ANSWERS else sys.stdout
    out.write(json.dumps(obj) + "\n")
    out.flush()


def _keep_stdout_for_answers() -> None:
    """Answers go to the original stdout; anything a library prints goes to stderr, so
    it can never be taken for an answer."""
    _ANSWERS.append(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    sys.stdout.flush()
    os.dup2(2, 1)


def _serve(peer: Peer) -> None:
    _reply({"ready": True})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        runs, steps = int(cmd["runs"]), int(cmd["steps"])
        began = time.perf_counter()
        getattr(peer, op)(runs, steps)
        seconds = time.perf_counter() - began
        _reply({"op": op, "runs": runs, "steps": steps, "seconds": seconds})


def main(open_peer: Callable[[str, str], Peer], version: str) -> None:
    """Run a worker: ``WORKER.py DB URL MODE [ARGS]`` (see the module docstring).

    ``open_peer(db, url)`` opens the library on the database (``db`` is ``sqlite`` or
    ``postgres``, ``url`` a file path or a PostgreSQL URL); ``version`` is reported with
    every answer."""
    ready, ready_cpu = time.monotonic(), time.process_time()
    _keep_stdout_for_answers()
    db, url, mode, *args = sys.argv[1:]
    if mode == "crash":
        CLOCK.kill_at = int(args[2])
    peer = open_peer(db, url)
    try:
        if mode == "serve":
            _serve(peer)
        elif mode == "crash":
            peer.crash(args[0], int(args[1]))
            raise SystemExit(f"run {args[0]} finished before step {args[2]} killed it")
        elif mode == "resume":
            result = peer.resume(args[0], int(args[1]))
            _reply({"ready": ready, "first_step": CLOCK.first_at, "ran": CLOCK.ran,
                    "result": result, "version": version, "ready_cpu": ready_cpu,
                    "first_step_cpu": CLOCK.first_cpu})
        else:
            raise SystemExit(f"unknown mode {mode!r}: serve, crash or resume")
    finally:
        peer.close()
