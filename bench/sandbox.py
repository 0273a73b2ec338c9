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
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

from common import Figure, median
from underway.sandbox import SandboxProfile, run_command_async, why_unavailable

TARGET_ADDED_MS = 20.0


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
