"""What a sandboxed command left behind: :class:`CommandResult`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["CommandResult"]


class CommandResult(BaseModel):
    """The outcome of one command: its output, exit code and how the sandbox ended it.

    ``stdout`` / ``stderr`` are decoded as UTF-8 (invalid bytes replaced); past the
    profile's ``output_cap_bytes`` a stream ends with ``"\\n[... truncated N bytes]"`` and
    its ``*_truncated`` flag is set. ``exit_code`` is the command's status: 128 + the signal
    number when a signal ended it inside the sandbox, minus the signal number when the
    process the worker started was killed (-9 at the time limit; any signal, without a
    sandbox). ``timed_out``: the wall-time limit ran out and every process of the command
    was killed. ``backend`` is the one that ran it; ``profile_digest`` the
    :meth:`~underway.sandbox.SandboxProfile.digest` of the profile it ran under.
    ``egress_refused``: each ``host:port`` the command tried to reach through the egress
    proxy and was refused (a profile with ``hosts``; the first 100).
    ``limits_reached``: a sentence for each limit of the call that held the command back
    while it ran (``"egress connections limit 16 reached: 2984 connections refused"``).
    """

    model_config = ConfigDict(frozen=True)

    stdout: str
    stderr: str
    exit_code: int
    duration_ms: float
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    backend: str
    profile_digest: str
    egress_refused: tuple[str, ...] = ()
    limits_reached: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """The command exited with status 0 within its time."""
        return self.exit_code == 0 and not self.timed_out
