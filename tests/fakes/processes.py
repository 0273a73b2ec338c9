"""Waiting for a command run as a real process in a crash test, killing it if asked."""

from __future__ import annotations

import signal
import subprocess

import pytest

CHILD_TIMEOUT_S = 120.0
"""How long a command may take before the test calls it hung."""


def finish(proc: subprocess.Popen[bytes], kill_after: float | None = None) -> bool:
    """Wait for ``proc`` to end — SIGKILLing it ``kill_after`` seconds on, if given — and
    return True when it was killed (by the test, or by itself at a fault point). Any other
    end must be a success."""
    try:
        _, err = proc.communicate(timeout=kill_after if kill_after is not None
                                  else CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        if kill_after is None:
            proc.kill()
            proc.communicate()
            pytest.fail(f"{proc.args!r} hung for {CHILD_TIMEOUT_S}s")
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
    if proc.returncode == -signal.SIGKILL:
        return True
    assert proc.returncode == 0, err.decode(errors="replace")
    return False
