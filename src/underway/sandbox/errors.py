"""The errors the sandbox raises: :class:`SandboxError` and its kinds.

They sit under :class:`~underway.errors.UnderwayError`; :mod:`underway.errors` draws the
whole tree.

A command that runs and fails is not an error: its exit code, output and ``timed_out``
flag are in the :class:`~underway.sandbox.CommandResult`.
"""

from __future__ import annotations

from ..errors import ConfigurationError, UnderwayError

__all__ = ["SandboxError", "SandboxLimitReached", "SandboxUnavailable"]


class SandboxError(UnderwayError):
    """The sandbox could not be set up for this call; the command did not run.

    ``retryable`` is False: the same profile on the same host fails the same way.
    """

    retryable = False


class SandboxUnavailable(SandboxError, ConfigurationError):
    """No backend the profile allows is usable on this host.

    The message names every backend tried, why each was refused, and how to fix it
    (usually: install bubblewrap). Commands are never run unsandboxed instead.
    """


class SandboxLimitReached(SandboxError):
    """The worker's sandboxed calls already hold what its limits allow; this call was
    refused before it started (see :class:`~underway.sandbox.WorkerLimits`).

    The message names the limit. ``retryable`` is True: the room comes back as running
    calls finish.
    """

    retryable = True
