"""How a backend starts one command: :class:`Launch`, and the environment it gets."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import ConfigurationError
from ._child import ChildSetup
from .profile import Limits, SandboxProfile

SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class Launch:
    """Everything needed to start a command under one backend.

    ``setup``: the ``preexec_fn`` when the child must be prepared in Python (None: the
    argv itself does it, see :func:`~underway.sandbox._child.exec_chain`).
    ``setup_fd``: a pipe holding one byte that bubblewrap consumes once the sandbox is set
    up (so a setup failure is told apart from a failing command). ``close_after_spawn``: the
    parent's copies of descriptors handed to the child. ``on_kill``: extra work to stop
    the command when it is killed (Docker: the container outlives its client).
    ``kills_at_timeout``: the launched process SIGKILLs itself and the command at the time
    limit (:func:`deadline`), so its exit by SIGKILL means the time ran out.
    """

    backend: str
    argv: list[str]
    env: dict[str, str]
    setup: ChildSetup | None = None
    cwd: str | None = None
    pass_fds: tuple[int, ...] = ()
    setup_fd: int | None = None
    close_after_spawn: list[int] = field(default_factory=list)
    on_kill: Callable[[], None] | None = None
    kills_at_timeout: bool = False

    def release(self) -> None:
        """Close the parent's ends of the launch's pipes."""
        held = [] if self.setup_fd is None else [self.setup_fd]
        for fd in [*self.close_after_spawn, *held]:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.close_after_spawn = []
        self.setup_fd = None

    def set_up(self) -> bool:
        """Whether the sandbox reached the point of starting the command (always True for
        backends that cannot tell)."""
        if self.setup_fd is None:
            return True
        os.set_blocking(self.setup_fd, False)
        try:
            return os.read(self.setup_fd, 1) == b""
        except BlockingIOError:
            return True


def command_env(profile: SandboxProfile, home: str,
                extra: Mapping[str, str] | None) -> dict[str, str]:
    """The whole environment of a command: a fixed base, the host variables the profile
    allows by name, then the call's own ``extra`` values."""
    env = {
        "PATH": SANDBOX_PATH, "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "USER": "sandbox", "LOGNAME": "sandbox",
    }
    for name in profile.env_allow:
        if name in os.environ:
            env[name] = os.environ[name]
    for name, value in (extra or {}).items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ConfigurationError(f"sandbox env: {name!r} is not a variable name")
        if not isinstance(value, str) or "\x00" in value:
            raise ConfigurationError(
                f"sandbox env: the value of {name} must be a string without NUL bytes"
            )
        env[name] = value
    return env


def deadline(limits: Limits) -> list[str]:
    """The argv prefix that SIGKILLs the command's whole process group at ``timeout_s``
    (coreutils ``timeout``; empty where it is missing).

    The worker kills the group at the time limit too, from its event loop. A loop held up
    (a busy worker, a step computing for a while) would kill it late: this process, a
    separate one, keeps the time regardless. It is the launched process, so when it fires
    the worker sees it killed by SIGKILL (exit status -9) and reports ``timed_out``.
    """
    path = shutil.which("timeout")
    return [] if path is None else [path, "--signal=KILL", f"{limits.timeout_s}s"]
