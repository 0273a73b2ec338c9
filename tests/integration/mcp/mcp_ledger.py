"""The test MCP server (server.py) as the tests reach it: over stdio inside the sandbox, or
over Streamable HTTP from a process of its own on a free local port. Both write what they
do to a ledger directory, read back by :func:`effects`. A flow that calls it runs to its
end with :func:`run_to_end`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
import underway.mcp as uw_mcp
from underway import events as ev
from underway.sandbox import Limits, SandboxProfile
from underway.testing import memory_engine

SERVER = Path(__file__).with_name("server.py")
SITE = next(p for p in sys.path if p.endswith("site-packages"))
"""Where the SDK is installed: shown read-only in the sandbox, on its PYTHONPATH."""
PYTHON = os.path.realpath(sys.base_prefix) + "/bin/python3"
"""The interpreter inside the sandbox: the base one, whose prefix ``python=True`` shows."""
START_TIMEOUT_S = 60.0
"""Against a hang only: how long the HTTP server may take to listen."""


def ledger(root: Path) -> Path:
    """A ledger directory the sandbox's user may write."""
    path = root / "ledger"
    path.mkdir()
    os.chmod(path, 0o777)
    return path


def profile(led: Path, hosts: tuple[str, ...] = ()) -> SandboxProfile:
    """The sandbox the stdio server runs in: the SDK and the server read-only, the ledger
    writable, the network only to ``hosts``."""
    return SandboxProfile(backend="bwrap", python=True, ro_paths=[SITE, str(SERVER.parent)],
                          rw_paths=[str(led)], hosts=hosts,
                          limits=Limits(timeout_s=600, memory_mb=2048))


def stdio(led: Path, hosts: tuple[str, ...] = ()) -> uw_mcp.Stdio:
    """The server over stdio, in the sandbox."""
    return uw_mcp.Stdio(command=[PYTHON, str(SERVER), "stdio", str(led)],
                        profile=profile(led, hosts), env={"PYTHONPATH": SITE}, name="ledger")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_http(led: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the server over Streamable HTTP; returns the process and its URL once it
    accepts connections."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), "http", str(led), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_listening(proc, port)
    return proc, f"http://127.0.0.1:{port}/mcp"


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server :func:`start_http` started."""
    proc.kill()
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()


def wait_listening(proc: subprocess.Popen[bytes], port: int) -> None:
    """Return once ``port`` accepts a connection (the server is up), or fail when the
    process ends first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"the MCP server exited: {err}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            continue
    raise TimeoutError(f"the MCP server did not listen on {port}")


def http(url: str) -> uw_mcp.HTTP:
    """The server over Streamable HTTP, allowed at 127.0.0.1."""
    return uw_mcp.HTTP(url=url, hosts=("127.0.0.1",), name="ledger")


def effects(led: Path) -> list[dict[str, Any]]:
    """Every effect the server recorded, in order."""
    path = led / "effects"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


class Seen(BaseModel):
    """A test flow's state: what its calls returned, and the errors they raised."""

    results: list[Any] = []
    errors: list[str] = []


async def run_to_end(flow: uw.Flow[Any, Any], toolset: uw_mcp.Toolset | None = None
                     ) -> tuple[uw.RunState, list[ev.Event]]:
    """Run ``flow`` once on a memory engine to its end: the run's state and its journal.
    ``toolset`` is closed after, whatever happened."""
    engine, _ = memory_engine([flow])
    try:
        run_id, _ = engine.start(flow)
        state = await uw.Runner(engine).run_until_complete(run_id)
        return state, [r.event for r in engine.journal.history("default", run_id)]
    finally:
        if toolset is not None:
            await toolset.aclose()
