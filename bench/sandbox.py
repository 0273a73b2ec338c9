"""What the bubblewrap sandbox adds to a command: ``true`` run plainly and in the sandbox.

Both run on one asyncio event loop as a tool would run them, with stdout and stderr
captured: the baseline spawns ``true`` with ``asyncio.create_subprocess_exec``; the
sandboxed call is ``run_command_async(["true"])`` under the default bubblewrap profile
(fresh workspace, every namespace new, dropped to the sandbox user when root, limits
set). Calls alternate so that drift in the machine's load hits both alike; each figure is
the median of ``reps``.

Where a Docker engine answers and ``UNDERWAY_TEST_DOCKER_IMAGE`` names a local image
(``make bench`` starts the engine and builds the image when it can), ``true`` in a
throwaway container is measured too, against its own plain baseline: a diagnostic, with no
target (a container costs far more than namespaces).

A neighbour's calls during a flood: one sandboxed command opens :data:`FLOOD_CONNECTIONS`
connections to its egress proxy, 100 at a time, as fast as it can; meanwhile ``true`` is
run in the sandbox again and again on the same event loop. The slowest of those calls
says what one call's flood costs the others.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

from common import Figure, median
from underway.sandbox import SandboxProfile, run_command_async, why_unavailable

TARGET_ADDED_MS = 20.0
FLOOD_CONNECTIONS = 20_000
TARGET_NEIGHBOUR_MS = 1000.0
FLOOD = r"""
import socket, sys
pending, answered = [], 0
for _ in range(int(sys.argv[1])):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(b"CONNECT not.listed.invalid:443 HTTP/1.1\r\n\r\n")
    pending.append(s)
    if len(pending) >= 100:
        s = pending.pop(0)
        answered += bool(s.recv(4096))
        s.close()
print(answered + sum(bool(s.recv(4096)) for s in pending))
"""
"""Opens ``argv[1]`` connections to the proxy, 100 at a time; prints how many were answered
(``403`` within the call's limit, ``503`` past it)."""


async def _plain() -> float:
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "true", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    await proc.communicate()
    return (time.perf_counter() - began) * 1000


async def _sandboxed(profile: SandboxProfile) -> float:
    began = time.perf_counter()
    result = await run_command_async(["true"], profile=profile)
    if not result.ok:
        raise RuntimeError(f"`true` failed in the sandbox: {result}")
    return (time.perf_counter() - began) * 1000


async def _measure(reps: int, profile: SandboxProfile) -> tuple[list[float], list[float]]:
    for _ in range(3):  # warm-up: the backend probe, imports, page cache
        await _plain()
        await _sandboxed(profile)
    plain, boxed = [], []
    for _ in range(reps):
        plain.append(await _plain())
        boxed.append(await _sandboxed(profile))
    return plain, boxed


def bench(*, reps: int = 50) -> list[Figure]:
    """Median latency of ``true`` plainly and in the bubblewrap sandbox."""
    if (why := why_unavailable("bwrap")) is not None:
        raise RuntimeError(f"bubblewrap is not usable here ({why}); run scripts/ensure-bwrap")
    plain, boxed = asyncio.run(_measure(reps, SandboxProfile(backend="bwrap")))
    base, value = median(plain), median(boxed)
    added = value - base
    return [
        Figure("sandbox.true_subprocess", base, "ms", note=f"median of {reps}"),
        Figure("sandbox.true_bwrap", value, "ms", base, value / base, "diagnostic",
               note=f"median of {reps}; baseline: sandbox.true_subprocess"),
        Figure("sandbox.bwrap_added_per_call", added, "ms", target=f"< {TARGET_ADDED_MS:g} ms",
               ok=added < TARGET_ADDED_MS, note="sandbox.true_bwrap - sandbox.true_subprocess"),
        *_docker(max(5, reps // 5)),
        *_flood(),
    ]


async def _neighbours() -> tuple[list[float], float]:
    profile = SandboxProfile(backend="bwrap", hosts=["allowed.invalid"])
    began = time.perf_counter()
    flood = asyncio.create_task(run_command_async(
        ["/usr/bin/python3", "-c", FLOOD, str(FLOOD_CONNECTIONS)], profile=profile))
    calls = []
    while not flood.done():
        calls.append(await _sandboxed(SandboxProfile(backend="bwrap")))
    done = await flood
    if not done.ok or done.stdout.strip() != str(FLOOD_CONNECTIONS):
        raise RuntimeError(f"the flood did not get every answer: {done}")
    return calls, time.perf_counter() - began


def _flood() -> list[Figure]:
    calls, took = asyncio.run(_neighbours())
    slowest = max(calls)
    return [
        Figure("sandbox.flood_seconds", took, "s", target="diagnostic",
               note=f"{FLOOD_CONNECTIONS} connections to one call's proxy, all answered"),
        Figure("sandbox.neighbour_slowest_ms", slowest, "ms",
               target=f"< {TARGET_NEIGHBOUR_MS:g} ms", ok=slowest < TARGET_NEIGHBOUR_MS,
               note=f"slowest of {len(calls)} sandboxed `true` calls during the flood, "
                    f"median {median(calls):.1f} ms"),
    ]


def _docker(reps: int) -> list[Figure]:
    image = os.environ.get("UNDERWAY_TEST_DOCKER_IMAGE")
    profile = SandboxProfile(backend="docker", image=image or "-")
    if not image or why_unavailable("docker", profile) is not None:
        return []
    plain, boxed = asyncio.run(_measure(reps, profile))
    base, value = median(plain), median(boxed)
    return [Figure("sandbox.true_docker", value, "ms", base, value / base, "diagnostic",
                   note=f"median of {reps}; baseline: plain `true` in the same run")]
