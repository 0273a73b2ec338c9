"""Tools that run what a model wrote inside the sandbox: :func:`shell_tool` and
:func:`python_tool`.

Both return a :class:`~underway.effects.Tool` whose arguments and result are pydantic
models (so the engine validates them and journals the result), and whose ``sandbox``
is the profile (the engine journals its digest with each call). A command that fails or
times out is a result, not an error: the agent sees its exit code and output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import replace

from pydantic import BaseModel, Field

from ..effects import ReconcileFn, Tool, ToolFn
from ..errors import ConfigurationError
from ..retry import CircuitBreaker, RetryPolicy
from ._budget import Budget
from ._mounts import HostPath
from ._workspace import pin_workspace
from .backends import select
from .errors import SandboxError
from .profile import SandboxProfile, python_prefix
from .result import CommandResult
from .run import DEFAULT_PROFILE, run_command_async

__all__ = ["PythonArgs", "ShellArgs", "python_tool", "shell_tool"]

TOOL_TIMEOUT_MARGIN_S = 15.0
"""How much longer than the sandbox's own time limit the engine waits for a call: the
sandbox reports ``timed_out`` itself, and cleans up, before the engine would cancel it."""
MAX_CODE_CHARS = 100_000
"""Longest program the code tool takes (it travels as one argv entry)."""


class ShellArgs(BaseModel):
    """Arguments of a shell tool: the command line, and text for its stdin."""

    command: str = Field(min_length=1)
    stdin: str | None = None


class PythonArgs(BaseModel):
    """Arguments of a code tool: Python source, and text for its stdin."""

    code: str = Field(min_length=1, max_length=MAX_CODE_CHARS)
    stdin: str | None = None


def shell_tool(
    *,
    name: str = "shell",
    profile: SandboxProfile = DEFAULT_PROFILE,
    workspace: str | os.PathLike[str] | None = None,
    shell: str = "/bin/sh",
    env: Mapping[str, str] | None = None,
    mutating: bool = True,
    idempotent: bool = False,
    timeout: float | None = None,
    reconcile: ReconcileFn | None = None,
    retry: RetryPolicy | None = None,
    circuit: CircuitBreaker | None = None,
    budget: Budget | None = None,
) -> Tool:
    """A tool running ``{"command": ..., "stdin": ...}`` with ``shell -c`` in the sandbox.

    The effect options mean what they mean for any :class:`~underway.effects.Tool`. A shell
    that changes its workspace is mutating. It is idempotent only if running a command twice
    is harmless.

    Args:
        name: The tool's name.
        profile: The sandbox profile.
        workspace: A host directory every call works in; by default, a fresh one per call.
            It is resolved now. Every call verifies it is still that directory, and refuses
            to run if not.
        shell: The shell that runs the command.
        env: Variables set on top of the sandbox's base environment.
        mutating: It changes the world.
        idempotent: It may safely run again with the same key.
        timeout: Engine side; defaults to the profile's time limit plus a margin.
        reconcile: Asks the outside system what happened to a key.
        retry: Retries failures on durable timers.
        circuit: Fails fast after repeated failures.
        budget: The worker budget every call is admitted by; by default, the process's.

    Raises:
        ConfigurationError: The profile's mounts overlap the workspace (see
            docs/sandbox.md).
    """
    frozen_env = dict(env or {})
    pinned = _pin(profile, workspace)

    async def run_shell(args: ShellArgs) -> CommandResult:
        return await run_command_async([shell, "-c", args.command], profile=profile,
                                       workspace=pinned, stdin=args.stdin, env=frozen_env,
                                       budget=budget)

    return _tool(name, run_shell, ShellArgs, profile, mutating=mutating,
                 idempotent=idempotent, timeout=timeout, reconcile=reconcile, retry=retry,
                 circuit=circuit)


def python_tool(
    *,
    name: str = "python",
    profile: SandboxProfile = DEFAULT_PROFILE,
    workspace: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    mutating: bool = True,
    idempotent: bool = False,
    timeout: float | None = None,
    reconcile: ReconcileFn | None = None,
    retry: RetryPolicy | None = None,
    circuit: CircuitBreaker | None = None,
    budget: Budget | None = None,
) -> Tool:
    """A tool running ``{"code": ..., "stdin": ...}`` as Python in the sandbox.

    Under bubblewrap (or ``none``) the code runs on this process's own interpreter. Its
    prefix is shown read-only (the profile gains ``python=True``). It runs in isolated mode
    (``-I``: no user site, no ``PYTHON*`` variables). The packages installed in that prefix
    can be imported, those of a virtualenv cannot. Under Docker it runs on the image's
    ``python3``.

    Args:
        name: The tool's name.
        profile: The sandbox profile.
        workspace: As for :func:`shell_tool`.
        env: Variables set on top of the sandbox's base environment.
        mutating: It changes the world.
        idempotent: It may safely run again with the same key.
        timeout: Engine side; defaults to the profile's time limit plus a margin.
        reconcile: Asks the outside system what happened to a key.
        retry: Retries failures on durable timers.
        circuit: Fails fast after repeated failures.
        budget: The worker budget every call is admitted by; by default, the process's.
    """
    profile = profile if profile.python else replace(profile, python=True)
    frozen_env = dict(env or {})
    pinned = _pin(profile, workspace)

    async def run_python(args: PythonArgs) -> CommandResult:
        argv = [interpreter(select(profile).name), "-I", "-c", args.code]
        return await run_command_async(argv, profile=profile, workspace=pinned,
                                       stdin=args.stdin, env=frozen_env, budget=budget)

    return _tool(name, run_python, PythonArgs, profile, mutating=mutating,
                 idempotent=idempotent, timeout=timeout, reconcile=reconcile, retry=retry,
                 circuit=circuit)


def interpreter(backend: str) -> str:
    """The Python a code tool runs under ``backend``: the image's for Docker, else this
    process's base interpreter (inside its prefix, which the sandbox shows)."""
    if backend == "docker":
        return "python3"
    v = sys.version_info
    candidate = os.path.join(python_prefix(), "bin", f"python{v.major}.{v.minor}")
    return candidate if os.path.exists(candidate) else os.path.realpath(sys.executable)


def _pin(profile: SandboxProfile,
         workspace: str | os.PathLike[str] | None) -> HostPath | None:
    """The tool's workspace, resolved once for all its calls, and checked with the profile."""
    if workspace is None:
        return None
    try:
        pinned = pin_workspace(workspace)
    except SandboxError as exc:
        raise ConfigurationError(str(exc)) from None
    problem = profile.refusal(pinned)
    if problem is not None:
        raise ConfigurationError(f"sandbox tool refused: {problem}")
    return pinned


def _tool(name: str, fn: ToolFn, args_model: type[BaseModel], profile: SandboxProfile, *,
          mutating: bool, idempotent: bool, timeout: float | None,
          reconcile: ReconcileFn | None, retry: RetryPolicy | None,
          circuit: CircuitBreaker | None) -> Tool:
    t = Tool(
        name=name, fn=fn, mutating=mutating, idempotent=idempotent,
        timeout=timeout if timeout is not None
        else profile.limits.timeout_s + TOOL_TIMEOUT_MARGIN_S,
        reconcile=reconcile, args_model=args_model, result_model=CommandResult,
        retry=retry, circuit=circuit,
    )
    if hasattr(t, "sandbox"):
        object.__setattr__(t, "sandbox", profile)
    return t
