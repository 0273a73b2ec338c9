"""The Docker backend against a real engine (started by ``make test`` when it can, with a
local image: see ``tests/fakes/docker_image.py``): commands run in a throwaway container
that is gone afterwards, the workspace is the only way out, limits hold, and a timeout
kills the container, not just the client."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from fakes.docker_image import engine_reason, require_image
from underway.sandbox import Limits, SandboxProfile, python_tool, run_command
from underway.testing import memory_engine

PATIENCE_S = 120.0
"""How long a test waits for a container to go, or for a command that takes milliseconds
(a container start on a busy machine can take seconds): a guard against hangs only."""


@pytest.fixture
def profile() -> SandboxProfile:
    reason = engine_reason()
    if reason is not None:
        pytest.skip(f"no Docker engine here: {reason} (test_fail_closed checks the refusal)")
    return SandboxProfile(backend="docker", image=require_image(),
                          limits=Limits(timeout_s=PATIENCE_S, memory_mb=256, max_processes=32))


def containers(owner: str | None = None) -> list[str]:
    """Names of the sandbox containers this process launched (or ``owner``, a worker
    identity, launched) that exist now, running or not. Filtering by owner keeps another
    process's containers on the same engine out of the count."""
    from underway.identity import worker_identity
    from underway.sandbox import docker

    label = f"{docker.LABEL}={owner or worker_identity()}"
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={label}",
                          "--format", "{{.Names}}"], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    return sorted(out.split())


def test_a_command_runs_in_a_container_that_is_gone_afterwards(
    profile: SandboxProfile, tmp_path: Path,
) -> None:
    before = containers()
    r = run_command("echo out; echo err >&2; echo kept > note.txt; exit 3", profile=profile,
                    workspace=tmp_path)
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 3)
    assert r.backend == "docker" and r.profile_digest == profile.digest()
    assert (tmp_path / "note.txt").read_text() == "kept\n"  # the workspace is shared
    assert containers() == before


def test_the_container_runs_as_nobody_without_capabilities_or_network(
    profile: SandboxProfile,
) -> None:
    r = run_command("id -u; grep CapEff /proc/self/status; ls /sys/class/net", profile=profile)
    uid, caps, nets = r.stdout.split("\n", 2)
    assert uid == "65534" and caps.split()[-1] == "0000000000000000"
    assert nets.split() == ["lo"]


def test_output_past_the_cap_is_cut_with_a_marker(profile: SandboxProfile) -> None:
    capped = replace(profile, limits=replace(profile.limits, output_cap_bytes=1000))
    r = run_command("head -c 5000 /dev/zero | tr '\\0' x", profile=capped)
    assert r.stdout_truncated and r.stdout.startswith("x" * 1000)
    assert r.stdout.endswith("[... truncated 4000 bytes]")


def test_a_timeout_kills_the_container_not_only_the_client(profile: SandboxProfile) -> None:
    quick = replace(profile, limits=replace(profile.limits, timeout_s=2))
    # Far longer than the test waits: a container left running is still there at the end.
    r = run_command("sleep 3600", profile=quick)
    assert r.timed_out and r.exit_code == -9
    deadline = time.monotonic() + PATIENCE_S
    while containers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers() == []


class Empty(BaseModel):
    """No state."""


def test_a_python_tool_runs_its_code_in_the_container(profile: SandboxProfile) -> None:
    code = python_tool(profile=profile)
    flow: uw.Flow[Empty, Any] = uw.Flow("py", state=Empty, tools=[code])

    @flow.step
    async def go(ctx: uw.RunContext[Empty, Any]) -> Any:
        out = await ctx.call(code, {"code": "import sys; print(sys.version_info[:2])"})
        return ctx.done(out)

    engine, _ = memory_engine([flow])
    run_id, _ = engine.start(flow)
    state = asyncio.run(uw.Runner(engine).run_until_complete(run_id))
    assert state.status == "completed", state.error
    assert state.result["exit_code"] == 0 and state.result["backend"] == "docker"
    assert state.result["stdout"].startswith("(3, ")
    [started] = [r.event for r in engine.journal.history("default", run_id)
                 if type(r.event).__name__ == "ToolStarted"]
    assert started.sandbox_profile == state.result["profile_digest"]


def test_only_containers_whose_launcher_is_gone_are_reaped(profile: SandboxProfile) -> None:
    from underway.identity import worker_identity
    from underway.sandbox import docker

    gone = subprocess.Popen(["true"])
    gone.wait()
    host, space, _, _ = worker_identity().split(":")
    # A start time no process had: the dead owner is this test's alone.
    dead = f"{host}:{space}:{gone.pid}:{uuid.uuid4().int % 10**9 + 1}"
    tag = uuid.uuid4().hex[:8]
    orphan, living = f"underway-sandbox-orphan-{tag}", f"underway-sandbox-living-{tag}"
    for name, owner in ((orphan, dead), (living, worker_identity())):
        subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--label",
                        f"{docker.LABEL}={owner}", str(profile.image), "sleep", "3600"],
                       check=True, capture_output=True, timeout=60)
    try:
        # Another process's first use of the engine reaps orphans too; whoever reaps,
        # the container of the living launcher is never among them.
        reaped = docker.reap_orphans("docker")
        assert living not in reaped
        assert orphan in reaped or containers(dead) == []
        deadline = time.monotonic() + PATIENCE_S
        while containers(dead) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert containers(dead) == []
        assert containers() == [living]
    finally:
        subprocess.run(["docker", "kill", orphan, living], capture_output=True, timeout=60,
                       check=False)
