"""The public surface of ``underway.sandbox``: pinned, so a change to it is deliberate."""

from __future__ import annotations

import underway.sandbox as sandbox


def test_public_names_are_pinned_and_documented() -> None:
    assert sorted(sandbox.__all__) == [
        "Budget", "CommandResult", "Limits", "PythonArgs", "SandboxError",
        "SandboxLimitReached", "SandboxProfile", "SandboxUnavailable", "ShellArgs",
        "WorkerLimits", "configure_worker", "python_tool", "run_command", "run_command_async",
        "shell_tool", "why_unavailable",
    ]
    for name in sandbox.__all__:
        assert getattr(sandbox, name).__doc__, f"{name} has no docstring"
