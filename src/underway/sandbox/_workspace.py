"""The host side of one call: :class:`CallDirs` — its workspace, its mounts, opened and
verified, and its staging points.

Each call gets a private directory under the system temp dir. A call without a workspace
of its own gets a fresh one in there, removed afterwards with everything the command
wrote. When the worker runs as root, the workspace is handed to the sandbox user
(``chown`` of the workspace directory itself, through the descriptor the call verified,
not of what is in it: a tree the sandbox wrote is never walked by root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from ._mounts import HostPath, Mount, overlap, replaceable_mount
from .errors import SandboxError
from .profile import SandboxProfile

Workspace = str | os.PathLike[str] | HostPath | None
"""A call's workspace: a host directory (resolved by the call), one resolved earlier
(a tool's, see :func:`pin_workspace`), or None for a fresh one."""


@dataclass(frozen=True, slots=True)
class Bound:
    """A mount of one call with the open descriptor of its verified source."""

    mount: Mount
    fd: int


class CallDirs:
    """Directories for one call; use as a context manager (removed on exit).

    ``workspace``: the host directory shown as the sandbox's workspace (resolved and
    verified; ``self.workspace`` is its real path). ``owner``: ``(uid, gid)`` to hand it
    to once :meth:`bind` has checked the mounts, or None to leave ownership alone.
    """

    def __init__(self, workspace: Workspace, owner: tuple[int, int] | None) -> None:
        self.root = tempfile.mkdtemp(prefix="underway-sandbox-")
        self._staged = 0
        self._fds: list[int] = []
        try:
            # Others may pass through (to reach a staged path or the workspace) but not list.
            os.chmod(self.root, 0o711)
            if workspace is None:
                fresh = os.path.join(self.root, "workspace")
                os.mkdir(fresh, 0o700)
                workspace = fresh
            self.workspace_pin = (workspace if isinstance(workspace, HostPath)
                                  else pin_workspace(workspace))
            self._workspace_fd = self._open(self.workspace_pin, "workspace")
            self.workspace = self.workspace_pin.real
            self._owner = owner
        except BaseException:
            self.close()
            raise

    @property
    def egress_socket(self) -> str:
        """Where the call's egress proxy listens (when its profile lists hosts)."""
        return os.path.join(self.root, "egress.sock")

    def bind(self, profile: SandboxProfile, ids: tuple[int, int] | None) -> list[Bound]:
        """Every mount of ``profile`` and the workspace, each source opened and verified to
        be the object recorded when it was resolved (descriptors closed with the call).

        Raises :class:`SandboxError` when a source changed, when a mount lies inside a
        writable one (see :func:`~underway.sandbox._mounts.overlap`), or, with ``ids``
        (the sandbox user commands run as), when that user could replace a directory on
        the way to a source."""
        mounts = profile.host_mounts(self.workspace_pin)
        fixed = [*profile.fixed_mounts(), ("the call's private directory", self.root, None)]
        problem = overlap(mounts, fixed) or (None if ids is None
                                             else replaceable_mount(mounts, ids))
        if problem is not None:
            raise SandboxError(f"sandbox mounts refused, the command was not run: {problem}")
        bound = [Bound(m, self._open(m.source, m.what)) for m in mounts]
        if self._owner is not None:
            # Only now that the workspace passed every check, and through the descriptor
            # verified to be it: never whatever its path leads to by now.
            os.chown(f"/proc/self/fd/{self._workspace_fd}", *self._owner)
        return bound

    def _open(self, pin: HostPath, what: str) -> int:
        fd = pin.open(what=what)
        self._fds.append(fd)
        return fd

    def stage_point(self, *, is_dir: bool = True) -> str:
        """A fresh empty directory (or file), reachable by anyone, to bind a host path
        onto."""
        stage = os.path.join(self.root, "stage")
        if not os.path.isdir(stage):
            os.mkdir(stage, 0o755)
        point = os.path.join(stage, str(self._staged))
        self._staged += 1
        if is_dir:
            os.mkdir(point, 0o755)
        else:
            os.close(os.open(point, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        return point

    def close(self) -> None:
        """Close the call's descriptors and remove its private directory (never a
        workspace the caller gave)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        if self._fresh_and_empty():
            return
        if os.geteuid() != 0:
            _open_up(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    def _fresh_and_empty(self) -> bool:
        """Remove the call's directories the quick way when nothing was left in them (the
        usual case for a command that writes nothing, worth a millisecond per call)."""
        try:
            for name in os.listdir(self.root):
                path = os.path.join(self.root, name)
                if name == "stage":
                    for point in os.listdir(path):
                        _remove(os.path.join(path, point))
                os.rmdir(path)
            os.rmdir(self.root)
        except OSError:
            return False
        return True

    def __enter__(self) -> CallDirs:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _open_up(root: str) -> None:
    """Let a non-root owner remove directories the command made read-only (root needs no
    help; a non-root worker's sandbox runs as itself, so nothing here belongs to others)."""
    for here, dirs, _ in os.walk(root):
        for name in dirs:
            path = os.path.join(here, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, stat.S_IRWXU)


def pin_workspace(path: str | os.PathLike[str]) -> HostPath:
    """Resolve a workspace directory now, to be verified by every call that uses it."""
    p = Path(path)
    if not p.is_absolute():
        p = p.absolute()
    if not p.is_dir():
        raise SandboxError(
            f"sandbox workspace {str(p)!r} is not an existing directory; create it first "
            "or pass workspace=None for a fresh one per call"
        )
    pin = HostPath.resolve(p, what="workspace")
    if not pin.is_dir:
        raise SandboxError(f"sandbox workspace {str(p)!r} is not a directory")
    return pin


def _remove(point: str) -> None:
    if os.path.isdir(point):
        os.rmdir(point)
    else:
        os.unlink(point)
