"""What the child does between ``fork`` and ``exec``: :class:`ChildSetup`.

In order: stage host paths the sandbox user cannot reach (a private mount namespace with
bind mounts at reachable places, so bubblewrap can mount them in turn), drop from root to
the sandbox user, lower the resource limits, and ask the kernel to SIGKILL the child when
the thread that started it dies — set last, because changing ids clears it. A worker
killed with SIGKILL so takes its sandboxes with it: bubblewrap dies, and its
``--die-with-parent`` and PID namespace take every process inside along.

This code runs in a forked copy of a possibly multi-threaded process, so it only makes
system calls through functions resolved before the fork (:func:`prepare`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import stat
from dataclasses import dataclass
from typing import Any

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1


class _Calls:
    """libc functions the child needs, looked up once in the parent."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.unshare: Any = libc.unshare
        self.mount: Any = libc.mount
        self.prctl: Any = libc.prctl
        self.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                               ctypes.c_ulong, ctypes.c_void_p]
        self.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                               ctypes.c_ulong]


_calls: _Calls | None = None


def prepare() -> _Calls:
    """Resolve the libc functions :class:`ChildSetup` calls (in the parent, before fork)."""
    global _calls
    if _calls is None:
        _calls = _Calls()
    return _calls


@dataclass(frozen=True, slots=True)
class ChildSetup:
    """The ``preexec_fn`` of a sandboxed command.

    ``stage``: ``(host source, reachable mount point)`` pairs bound in a private mount
    namespace. ``uid`` / ``gid``: the ids to drop to (None: keep them). ``rlimits``:
    ``(resource, soft, hard)``. ``error_fd``: where a failure is described for the parent.
    """

    calls: _Calls
    parent_pid: int
    rlimits: tuple[tuple[int, int, int], ...] = ()
    uid: int | None = None
    gid: int | None = None
    stage: tuple[tuple[str, str], ...] = ()
    error_fd: int = -1

    def __call__(self) -> None:
        try:
            self._stage()
            if self.uid is not None and self.gid is not None:
                os.setgroups([])
                os.setresgid(self.gid, self.gid, self.gid)
                os.setresuid(self.uid, self.uid, self.uid)
            for res, soft, hard in self.rlimits:
                resource.setrlimit(res, (soft, hard))
            if self.calls.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
            if os.getppid() != self.parent_pid:
                raise OSError(0, "the worker exited while the sandbox was starting")
        except OSError as exc:
            self._report(str(exc))
            raise

    def _stage(self) -> None:
        if not self.stage:
            return
        c = self.calls
        if c.unshare(_CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) to stage host paths")
        # Private first, or the staging mounts would propagate to the host's namespace.
        if c.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(ctypes.get_errno(), "making the staging namespace private")
        for source, target in self.stage:
            if c.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                raise OSError(ctypes.get_errno(), f"staging {source} at {target}")

    def _report(self, message: str) -> None:
        if self.error_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.error_fd, message.encode(errors="replace")[:4000])


def rlimits_for(wanted: list[tuple[str, int, int]]) -> tuple[tuple[int, int, int], ...]:
    """Resolve ``(name, soft, hard)`` to resource numbers, never above the current hard
    limit (an unprivileged child may only lower it)."""
    out = []
    for name, soft, hard in wanted:
        res = getattr(resource, name)
        _, cur_hard = resource.getrlimit(res)
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        out.append((res, min(soft, hard), hard))
    return tuple(out)


def reachable(path: str, uid: int, gid: int) -> bool:
    """Whether a process with ``uid``/``gid`` (no extra groups) can walk to ``path``:
    search permission on every directory above it."""
    here = "/"
    for part in ["", *path.split("/")[1:-1]]:
        here = os.path.join(here, part)
        try:
            st = os.stat(here)
        except OSError:
            return False
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True
