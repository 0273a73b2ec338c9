"""The catalogue of escapes: what an attempt is, the verdict it returns, the profile it
runs under, and how it runs a command in the sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import cast

from ..backends import select
from ..profile import Backend, Limits, SandboxProfile
from ..result import CommandResult
from ..run import run_command_async
from ..tools import interpreter


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an escape was blocked, and what the host saw."""

    blocked: bool
    evidence: str


@dataclass(frozen=True, slots=True)
class Escape:
    """One escape attempt: ``attempt(profile)`` runs it under ``profile`` and judges it."""

    name: str
    what: str
    attempt: Callable[[SandboxProfile], Awaitable[Verdict]]


ESCAPES: list[Escape] = []
"""The catalogue, in the order the check runs it."""


def escape(name: str, what: str) -> Callable[
    [Callable[[SandboxProfile], Awaitable[Verdict]]], Callable[[SandboxProfile], Awaitable[Verdict]]
]:
    """Add the attempt it decorates to :data:`ESCAPES`: ``name``, trying to ``what``."""

    def register(
        fn: Callable[[SandboxProfile], Awaitable[Verdict]],
    ) -> Callable[[SandboxProfile], Awaitable[Verdict]]:
        ESCAPES.append(Escape(name, what, fn))
        return fn

    return register


def base_profile(backend: str, image: str | None = None) -> SandboxProfile:
    """The profile escapes run under unless they need tighter limits (``image``: the
    Docker image, which needs bash, coreutils and python3)."""
    profile = SandboxProfile(
        backend=cast(Backend, backend),
        limits=Limits(timeout_s=20, cpu_seconds=10, memory_mb=512, max_processes=32),
    )
    return profile if image is None else replace(profile, image=image)


async def run_bash(profile: SandboxProfile, script: str,
                   workspace: Path | None = None) -> CommandResult:
    """Run ``script`` with bash under ``profile`` (in ``workspace`` when given)."""
    return await run_command_async(["/bin/bash", "-c", script], profile=profile,
                                   workspace=workspace)


async def run_python(profile: SandboxProfile, code: str) -> CommandResult:
    """Run ``code`` with the sandbox's Python, isolated mode, under ``profile``."""
    profile = replace(profile, python=True)
    argv = [interpreter(select(profile).name), "-I", "-c", code]
    return await run_command_async(argv, profile=profile)


def output_of(r: CommandResult) -> str:
    """What a command said, on one line: its exit and the start of its output."""
    return f"exit {r.exit_code}{' (timed out)' if r.timed_out else ''}: " + \
        (r.stdout + r.stderr).strip().replace("\n", " | ")[:300]

