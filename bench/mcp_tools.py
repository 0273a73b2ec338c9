"""What underway adds to a call of an MCP tool, and what the sandbox adds to starting a
stdio MCP server. The servers are the example's (examples/mcp_agent), made with the
official SDK.

Calls: the shipping server over Streamable HTTP on a free local port. ``CALLS`` calls of
its read-only ``quote`` and of its mutating ``book_courier``, each through ``ctx.call`` in
one step of a run on SQLite (the guard, the journal; a mutating call commits its intent
first), against the same calls made directly with the SDK's client on one connection,
the baseline, in ``ROUNDS`` alternating rounds.

Start: the warehouse server over stdio, started and its tools listed (``Toolset.load``),
inside the bubblewrap sandbox, against the same server started plainly by the SDK's own
``stdio_client`` and listed, alternating, the median of ``STARTS`` each. Stopping the
server is left out of both.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

import underway as uw
import underway.mcp as uw_mcp
from common import Figure, median, sqlite_dir
from underway.sandbox import Limits, SandboxProfile, why_unavailable

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mcp_agent"
SITE = next(p for p in sys.path if p.endswith("site-packages"))
PYTHON = os.path.realpath(sys.base_prefix) + "/bin/python3"
CALLS = 40
ROUNDS = 5
"""Rounds of ``CALLS`` calls each way, alternating, so that drift in the machine's load
hits both alike; each figure is the median round's time per call."""
STARTS = 5
TARGETS = {"quote": 3.0, "book": 6.0, "start": 2.0}
"""The most each may cost, as a ratio of its baseline. A read-only call adds the guard and
its share of the step's commit; a mutating one its own intent commit (an fsync on SQLite)."""




def _shipping(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(EXAMPLE / "shipping.py"), str(data),
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the shipping server exited") from None


async def _direct(url: str) -> tuple[float, float]:
    async with Client(url, cache=None) as client:
        await client.list_tools()
        began = time.perf_counter()
        for _ in range(CALLS):
            await client.call_tool("quote", {"city": "Pune", "weight_kg": 1.0})
        quote = time.perf_counter() - began
        began = time.perf_counter()
        for i in range(CALLS):
            await client.call_tool("book_courier", {"order": f"D-{i}", "city": "Pune"})
        book = time.perf_counter() - began
    return quote * 1e3 / CALLS, book * 1e3 / CALLS


async def _guarded(url: str, db: str) -> tuple[float, float]:
    from pydantic import BaseModel

    class Nothing(BaseModel):
        pass

    toolset = await uw_mcp.Toolset(uw_mcp.HTTP(url=url, hosts=["127.0.0.1"])).load()
    quote, book = toolset.tool("quote"), toolset.tool("book_courier")
    spent: dict[str, float] = {}
    flow = uw.Flow("mcp_bench", state=Nothing, tools=[quote, book])

    @flow.step
    async def calls(ctx: uw.RunContext[Nothing, Any]) -> Any:
        began = time.perf_counter()
        for _ in range(CALLS):
            await ctx.call(quote, {"city": "Pune", "weight_kg": 1.0})
        spent["quote"] = time.perf_counter() - began
        began = time.perf_counter()
        for i in range(CALLS):
            await ctx.call(book, {"order": f"G-{i}", "city": "Pune"})
        spent["book"] = time.perf_counter() - began
        return ctx.done({})

    engine = uw.Engine(uw.connect(db), flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        state = await uw.Runner(engine).run_until_complete(run_id)
        assert state.status == "completed", state
    finally:
        await toolset.aclose()
        engine.store.close()
    return spent["quote"] * 1e3 / CALLS, spent["book"] * 1e3 / CALLS


async def _starts(data: Path) -> tuple[list[float], list[float]]:
    work = data / "warehouse"
    work.mkdir()
    profile = SandboxProfile(backend="bwrap", python=True, ro_paths=[SITE, str(EXAMPLE)],
                             limits=Limits(timeout_s=600, memory_mb=2048))
    boxed = uw_mcp.Stdio(command=[PYTHON, str(EXAMPLE / "warehouse.py"), "/workspace"],
                         profile=profile, env={"PYTHONPATH": SITE}, workspace=str(work))
    plain = StdioServerParameters(command=PYTHON, args=[str(EXAMPLE / "warehouse.py"),
                                                        str(work)], env={"PYTHONPATH": SITE})
    sandboxed, unsandboxed = [], []
    for _ in range(STARTS):
        # Started and listed; stopping is left out of both (the SDK's client waits out
        # its grace period for the server to exit).
        client = Client(plain, cache=None)
        began = time.perf_counter()
        await client.__aenter__()
        await client.list_tools()
        unsandboxed.append((time.perf_counter() - began) * 1e3)
        await client.__aexit__(None, None, None)
        began = time.perf_counter()
        toolset = await uw_mcp.Toolset(boxed).load()
        sandboxed.append((time.perf_counter() - began) * 1e3)
        await toolset.aclose()
    return sandboxed, unsandboxed


async def _rounds(url: str, db: str) -> dict[str, list[float]]:
    took: dict[str, list[float]] = {"quote": [], "book": [], "direct_quote": [],
                                    "direct_book": []}
    for _ in range(ROUNDS):
        quote, book = await _direct(url)
        took["direct_quote"].append(quote)
        took["direct_book"].append(book)
        quote, book = await _guarded(url, db)
        took["quote"].append(quote)
        took["book"].append(book)
    return took


def bench() -> list[Figure]:
    """MCP calls through the guard against direct SDK calls; a sandboxed server's start."""
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp, sqlite_dir() as d:
        data = Path(tmp)
        server, url = _shipping(data)
        try:
            took = asyncio.run(_rounds(url, f"sqlite:///{d}/bench.db"))
        finally:
            server.kill()
            server.wait()
        for name in ("quote", "book"):
            value, base = median(took[name]), median(took[f"direct_{name}"])
            ratio = value / base
            figures.append(Figure(
                f"mcp.http_{name}_call", value, "ms", base, ratio, f"<= {TARGETS[name]}",
                ratio <= TARGETS[name],
                note=f"{ROUNDS} rounds of {CALLS} calls through ctx.call on SQLite, "
                     "alternating with the SDK's own"))
        if why_unavailable("bwrap") is None:
            boxed, plain = asyncio.run(_starts(data))
            value, base = median(boxed), median(plain)
            figures.append(Figure(
                "mcp.stdio_start", value, "ms", base, value / base,
                f"<= {TARGETS['start']}", value / base <= TARGETS["start"],
                note=f"start and list tools, in bubblewrap against plain; median of {STARTS}"))
    return figures
