"""Invariant: one tool call cannot starve its worker or its neighbours.

Real bubblewrap sandboxes attack the worker that runs them, and the worker is this test
process. A command opens thousands of connections to its egress proxy: the worker's
descriptors and threads, sampled from ``/proc/self``, stay under the bounds its
:class:`WorkerLimits` state; each call keeps exactly its own connections, and the rest
are answered ``503`` or closed. A neighbour call run during such a flood, on the same
event loop, still finishes with the right result. A call the worker has no room for is
refused with :class:`SandboxLimitReached` naming the limit. A call holding every process
its limit allows does not keep another call of the same sandbox user from starting. A
worker out of descriptors loses no connection: its proxy waits, and serves it later.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from underway.sandbox import (
    Budget,
    CommandResult,
    Limits,
    SandboxLimitReached,
    SandboxProfile,
    WorkerLimits,
    run_command_async,
    why_unavailable,
)

PY = "/usr/bin/python3"
PER_CALL = 16
"""Each flooding call's ``egress_connections``."""
FLOOD_LIMITS = Limits(timeout_s=60, egress_connections=PER_CALL)
WAIT_S = 45.0
"""The most a scenario waits for a command to reach a point: a hang fails, never sleeps."""

FLOOD = r"""
import json, os, socket, sys
up, hold, total, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
until = sys.argv[5] if len(sys.argv) > 5 else ""

def ask():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    try:
        s.sendall(b"CONNECT " + up.encode() + b" HTTP/1.1\r\n\r\n")
    except OSError:
        pass
    return s

def answer(s):
    try:
        head = s.recv(4096)
    except OSError:
        head = b""
    return head.split(b"\r\n")[0].decode(errors="replace")

held = [ask() for _ in range(hold)]
out = {"held": [answer(s) for s in held], "refused": 0, "closed": 0, "other": [], "sent": 0}

def settle(s):
    line = answer(s)
    s.close()
    if " 503 " in line:
        out["refused"] += 1
    elif not line:
        out["closed"] += 1
    else:
        out["other"].append(line)
    if until and not os.path.exists("flooding"):
        open("flooding", "w").close()

pending = []
while out["sent"] < total or (until and not os.path.exists(until)):
    pending.append(ask())
    out["sent"] += 1
    if len(pending) >= window:
        settle(pending.pop(0))
for s in pending:
    settle(s)
print(json.dumps(out))
"""
"""Holds ``hold`` connections tunnelled to ``up``, then opens ``total`` more, ``window``
at a time, and counts their answers; with a file name ``until`` it goes on until that
file appears in its workspace, after writing ``flooding`` there once one was answered."""

HOLD_PROCESSES = r"""
import os, sys, time
count = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print("stopped at", count, type(exc).__name__)
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    count += 1
sys.stdout.flush()
open("full", "w").close()
while not os.path.exists("stop"):
    time.sleep(0.01)
"""
"""Forks until the process limit refuses, says so in ``full``, holds until ``stop``."""


@pytest.fixture(autouse=True)
def bubblewrap() -> None:
    reason = why_unavailable("bwrap", SandboxProfile(backend="bwrap"))
    assert reason is None, f"bubblewrap must be usable for these tests: {reason}"


@pytest.fixture
def upstream() -> Iterator[str]:
    """An allowed destination that completes connections and never answers: the
    kernel's backlog accepts the held tunnels, with no thread or descriptor here."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4 * PER_CALL)
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    srv.close()


@dataclass
class Peaks:
    """The most descriptors and threads this process held while it was watched; the
    first sample, taken before any call starts, is the baseline."""

    fds: list[int] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self) -> None:
        while not self.stop.is_set():
            self.fds.append(len(os.listdir("/proc/self/fd")))
            status = Path("/proc/self/status").read_text()
            self.threads.append(int(status.split("Threads:")[1].split()[0]))
            self.started.set()
            self.stop.wait(0.001)

    def extra_fds(self) -> int:
        return max(self.fds) - self.fds[0]

    def extra_threads(self) -> int:
        return max(self.threads) - self.threads[0]


@pytest.fixture
def peaks() -> Iterator[Peaks]:
    p = Peaks()
    t = threading.Thread(target=p.watch, daemon=True)
    t.start()
    assert p.started.wait(WAIT_S)
    yield p
    p.stop.set()
    t.join(WAIT_S)


def flood_profile(**limits: Any) -> SandboxProfile:
    return SandboxProfile(backend="bwrap", hosts=["127.0.0.1"],
                          limits=replace(FLOOD_LIMITS, **limits))


def flood_argv(up: str, *, total: int, until: str = "", window: int = 100) -> list[str]:
    return [PY, "-c", FLOOD, up, str(PER_CALL), str(total), str(window),
            *([until] if until else [])]


def counted(r: CommandResult) -> dict[str, Any]:
    assert r.ok and not r.timed_out, (r.exit_code, r.stdout[-500:], r.stderr[-2000:])
    out: dict[str, Any] = json.loads(r.stdout)
    return out


async def until(cond: Callable[[], bool], running: asyncio.Task[Any]) -> None:
    """Wait until ``cond()`` holds; fail at once if ``running`` ended first."""
    async with asyncio.timeout(WAIT_S):
        while not cond():
            if running.done():
                pytest.fail(f"the command ended first: {running.result()!r}")
            await asyncio.sleep(0.01)


def test_a_flood_of_connections_holds_the_worker_to_its_bounds(
        upstream: str, peaks: Peaks) -> None:
    """Two calls open 3,000 connections between them; the worker allows 2 calls and 32
    connections. Descriptors and threads stay under what those limits state."""
    limits = WorkerLimits(calls=2, egress_connections=2 * PER_CALL)
    budget = Budget(limits)

    async def both() -> list[CommandResult]:
        return list(await asyncio.gather(*(
            run_command_async(flood_argv(upstream, total=1500), profile=flood_profile(),
                              budget=budget) for _ in range(2))))

    try:
        results = asyncio.run(both())
    finally:
        budget.close()
    for r in results:
        out = counted(r)
        assert out["held"] == ["HTTP/1.1 200 Connection established"] * PER_CALL
        assert out["other"] == []
        assert out["refused"] + out["closed"] == out["sent"] == 1500
        assert out["refused"] > 0
        ((said, n),) = [(x, int(x.split(": ")[1].split()[0])) for x in r.limits_reached]
        assert said == f"egress connections limit {PER_CALL} reached: {n} connections refused"
        assert out["refused"] <= n <= out["sent"]
    assert peaks.extra_fds() <= limits.descriptors(), (peaks.extra_fds(), max(peaks.fds))
    assert peaks.extra_threads() <= limits.threads(), peaks.extra_threads()
    assert budget.usage().egress_connections == 0


def test_a_neighbour_call_finishes_during_a_flood(upstream: str, tmp_path: Path) -> None:
    """A call that fetches through its own proxy runs while another call floods its
    proxy on the same event loop, and gets its page."""
    budget = Budget(WorkerLimits(calls=4, egress_connections=4 * PER_CALL))
    neighbour = [PY, "-c", "import urllib.request as u, sys\n"
                 "print(u.urlopen('http://127.0.0.1:' + sys.argv[1] + '/n', timeout=15)"
                 ".read().decode())"]

    async def page(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        await writer.drain()
        writer.close()

    async def scenario() -> tuple[CommandResult, bool, CommandResult]:
        server = await asyncio.start_server(page, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            flood = asyncio.create_task(run_command_async(
                flood_argv(upstream, total=200, until="stop"), profile=flood_profile(),
                workspace=str(tmp_path), budget=budget))
            await until((tmp_path / "flooding").exists, flood)
            near = await run_command_async(
                [*neighbour, str(port)], budget=budget, profile=SandboxProfile(
                    backend="bwrap", hosts=["127.0.0.1"], limits=Limits(timeout_s=20)))
            flooding = not flood.done()
            (tmp_path / "stop").touch()
            return near, flooding, await flood

    try:
        near, flooding, flooded = asyncio.run(scenario())
    finally:
        budget.close()
    assert flooding
    assert near.ok and not near.timed_out and near.stdout == "hello\n", near.stderr
    assert near.limits_reached == ()
    out = counted(flooded)
    assert out["held"] == ["HTTP/1.1 200 Connection established"] * PER_CALL
    assert out["refused"] > 0 and out["other"] == []


def test_a_call_past_the_worker_limit_is_refused_naming_it(
        upstream: str, tmp_path: Path) -> None:
    """While one call holds the worker's every egress connection, a second call with
    hosts is refused before it runs; a call without hosts still runs."""
    budget = Budget(WorkerLimits(calls=4, egress_connections=PER_CALL))
    marker = tmp_path / "ran"

    async def scenario() -> tuple[str, CommandResult, str, CommandResult]:
        flood = asyncio.create_task(run_command_async(
            flood_argv(upstream, total=50, until="stop"), profile=flood_profile(),
            workspace=str(tmp_path), budget=budget))
        await until((tmp_path / "flooding").exists, flood)
        with pytest.raises(SandboxLimitReached) as full:
            await run_command_async([PY, "-c", f"open({str(marker)!r}, 'w')"],
                                    profile=flood_profile(), budget=budget)
        offline = await run_command_async(
            [PY, "-c", "print('offline')"], budget=budget,
            profile=SandboxProfile(backend="bwrap", limits=Limits(timeout_s=20)))
        with pytest.raises(SandboxLimitReached) as too_big:
            await run_command_async([PY, "-c", "pass"], budget=budget,
                                    profile=flood_profile(egress_connections=PER_CALL + 1))
        (tmp_path / "stop").touch()
        return str(full.value), offline, str(too_big.value), await flood

    try:
        full, offline, too_big, flooded = asyncio.run(scenario())
    finally:
        budget.close()
    assert full.startswith(f"sandbox worker egress connections limit {PER_CALL} reached "
                           f"({PER_CALL} reserved by running calls, this call needs "
                           f"{PER_CALL}); the command was not run"), full
    assert not marker.exists()
    assert offline.ok and offline.stdout == "offline\n"
    assert too_big.startswith(f"sandbox worker egress connections limit {PER_CALL} is less "
                              f"than one call under this profile reserves ({PER_CALL + 1})")
    out = counted(flooded)
    assert out["held"] == ["HTTP/1.1 200 Connection established"] * PER_CALL
    assert out["refused"] > 0
    assert flooded.limits_reached[0].startswith(f"egress connections limit {PER_CALL} "
                                                "reached")


def test_one_calls_process_limit_leaves_another_call_of_its_user_room(tmp_path: Path) -> None:
    """Both calls run as the same sandbox user. The first forks until its limit refuses
    and holds there; the second still starts and forks its own children."""
    cap = 16
    profile = SandboxProfile(backend="bwrap", limits=Limits(timeout_s=30, max_processes=cap))
    if os.geteuid() == 0:
        # A user of this test's own: a user's processes count on the whole host too.
        ids = 1_950_000_000 + os.getpid() % 1_000_000
        profile = SandboxProfile(backend="bwrap", limits=profile.limits, uid=ids, gid=ids)
    budget = Budget(WorkerLimits(calls=4))
    second = [PY, "-c", "import os\n"
              "pids = [os.fork() or os._exit(0) for _ in range(8)]\n"
              "print(sum(os.waitpid(p, 0)[1] == 0 for p in pids))"]

    async def scenario() -> tuple[CommandResult, bool, CommandResult]:
        holder = asyncio.create_task(run_command_async(
            [PY, "-c", HOLD_PROCESSES], profile=profile, workspace=str(tmp_path),
            budget=budget))
        await until((tmp_path / "full").exists, holder)
        other = await run_command_async(second, profile=profile, budget=budget)
        holding = not holder.done()
        (tmp_path / "stop").touch()
        return other, holding, await holder

    try:
        other, holding, held = asyncio.run(scenario())
    finally:
        budget.close()
    assert holding
    assert other.ok and other.stdout == "8\n", (other.exit_code, other.stderr)
    assert held.ok, held.stderr
    count = int(held.stdout.split()[2])
    assert 0 < count < cap and "BlockingIOError" in held.stdout, held.stdout


OUT_OF_DESCRIPTORS = r"""
import asyncio, os, resource, socket, sys, tempfile
from underway.sandbox._budget import Budget, WorkerLimits
from underway.sandbox._proxy import EgressProxy

resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

async def main():
    loop = asyncio.get_running_loop()
    path = os.path.join(tempfile.mkdtemp(), "egress.sock")
    budget = Budget(WorkerLimits(calls=1, egress_connections=4))
    async with EgressProxy(path, ["allowed.example"], connections=4, budget=budget) as proxy:
        client = socket.socket(socket.AF_UNIX)
        hog = []
        try:
            while True:
                hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            print("descriptors exhausted:", exc.strerror)
        client.connect(path)
        client.sendall(b"CONNECT denied.example:443 HTTP/1.1\r\n\r\n")
        while proxy.accepting:
            await asyncio.sleep(0.01)
        print("paused, serving", proxy.open_connections)
        for fd in hog:
            os.close(fd)
        client.setblocking(False)
        head = await asyncio.wait_for(loop.sock_recv(client, 4096), 30)
        print(head.split(b"\r\n")[0].decode(), "accepting", proxy.accepting)
        client.close()
    budget.close()

asyncio.run(main())
"""
"""A worker out of descriptors: the proxy stops taking connections, without spinning,
and serves the one waiting once descriptors are free again."""


def test_a_worker_out_of_descriptors_serves_the_waiting_connection_later() -> None:
    done = subprocess.run([sys.executable, "-c", OUT_OF_DESCRIPTORS], capture_output=True,
                          text=True, timeout=WAIT_S, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "descriptors exhausted: Too many open files",
        "paused, serving 0",
        "HTTP/1.1 403 Forbidden accepting True",
    ], done.stdout
