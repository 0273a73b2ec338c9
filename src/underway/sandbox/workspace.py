"""The host side of one call: :class:`CallDirs` — its workspace and its staging points.

Each call gets a private directory under the system temp dir. A call without a workspace
of its own gets a fresh one in there, removed afterwards with everything the command
wrote. When the worker runs as root, the workspace is handed to the sandbox user
(``chown`` of the workspace directory itself, not of what is in it: a tree the sandbox
wrote is never walked by root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path
from types import TracebackType

from .errors import SandboxError


class CallDirs:
    """Directories for one call; use as a context manager (removed on exit).

    ``workspace``: the host directory shown as the sandbox's workspace. ``owner``:
    ``(uid, gid)`` to hand it to, or None to leave ownership alone.
    """

    def __init__(self, workspace: str | os.PathLike[str] | None,
                 owner: tuple[int, int] | None) -> None:
        self.root = tempfile.mkdtemp(prefix="underway-sandbox-")
        self._staged = 0
        try:
            # Others may pass through (to reach a staged path or the workspace) but not list.
            os.chmod(self.root, 0o711)
            if workspace is None:
                self.workspace = os.path.join(self.root, "workspace")
                os.mkdir(self.workspace, 0o700)
            else:
                self.workspace = _existing_dir(workspace)
            if owner is not None:
                os.chown(self.workspace, *owner)
        except BaseException:
            self.close()
            raise

    def stage_point(self) -> str:
        """A fresh empty directory, reachable by anyone, to bind a host path onto."""
        stage = os.path.join(self.root, "stage")
        if not os.path.isdir(stage):
            os.mkdir(stage, 0o755)
        point = os.path.join(stage, str(self._staged))
        self._staged += 1
        os.mkdir(point, 0o755)
        return point

    def close(self) -> None:
        """Remove the call's private directory (never a workspace the caller gave)."""
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
                        os.rmdir(os.path.join(path, point))
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


def _existing_dir(path: str | os.PathLike[str]) -> str:
    p = Path(path)
    if not p.is_absolute():
        p = p.absolute()
    if not p.is_dir():
        raise SandboxError(
            f"sandbox workspace {str(p)!r} is not an existing directory; create it first "
            "or pass workspace=None for a fresh one per call"
        )
    return os.path.realpath(p)
