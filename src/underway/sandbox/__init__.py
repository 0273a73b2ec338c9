"""Sandboxed execution of shell commands and code for tools.

Build a :class:`SandboxProfile` (what a command may see and use), then run commands with
:func:`run_command_async` / :func:`run_command`, or hand an agent :func:`shell_tool` and
:func:`python_tool`. The default backend is bubblewrap: fresh namespaces, a read-only
root holding only system directories, a private workspace and ``/tmp``, no network, an
unprivileged user, resource limits, and no process outliving its call. With no usable
backend a call raises :class:`SandboxUnavailable`; it never runs unsandboxed unless
``backend="none"`` is chosen and explicitly allowed. Each call is admitted by the
worker's :class:`Budget` (:class:`WorkerLimits`, set with :func:`configure_worker`), so
no call can spend what its neighbours need. See docs/sandbox.md.

``python -m underway.sandbox.escapes`` tries a catalogue of escapes on this host and
prints how many each backend blocked.
"""

from __future__ import annotations

from ._budget import Budget, WorkerLimits, configure_worker
from .backends import why_unavailable
from .errors import SandboxError, SandboxLimitReached, SandboxUnavailable
from .profile import Limits, SandboxProfile
from .result import CommandResult
from .run import run_command, run_command_async
from .tools import PythonArgs, ShellArgs, python_tool, shell_tool

__all__ = [
    "Budget",
    "CommandResult",
    "Limits",
    "PythonArgs",
    "SandboxError",
    "SandboxLimitReached",
    "SandboxProfile",
    "SandboxUnavailable",
    "ShellArgs",
    "WorkerLimits",
    "configure_worker",
    "python_tool",
    "run_command",
    "run_command_async",
    "shell_tool",
    "why_unavailable",
]
