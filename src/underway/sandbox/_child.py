"""Preparing the process that becomes the sandbox: drop from root to the sandbox user,
lower the resource limits, and ask the kernel to SIGKILL it when the thread that started
it dies (set after the ids change, which clears it). A worker killed with SIGKILL so
takes its sandboxes with it: bubblewrap dies, and its ``--die-with-parent`` and PID
namespace take every process inside along.

Two ways, same steps. :func:`exec_chain` prefixes the command with util-linux's
``setpriv`` and ``prlimit``, so the worker can start it with ``vfork`` — which costs the
same for a worker of any size. :class:`ChildSetup` does the steps in Python between
``fork`` and ``exec`` (a full ``fork``: tens of milliseconds for a large worker) and is
used only when something needs it: staging host paths the sandbox user cannot reach (a
private mount namespace with bind mounts at reachable places, so bubblewrap can mount
them in turn), or a host without ``setpriv``/``prlimit``.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
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
        import ctypes  # only when a child needs setting up in Python: a few ms of import

        libc = ctypes.CDLL(None, use_errno=True)
        self.get_errno: Any = ctypes.get_errno
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

    ``stage``: ``(host source, reachable mount point, dev, ino)`` bound in a private mount
    namespace, each checked after mounting to be the object with that device and inode.
    ``uid`` / ``gid``: the ids to drop to (None: keep them). ``rlimits``:
    ``(resource, soft, hard)``. ``error_fd``: where a failure is described for the parent.
    """

    calls: _Calls
    parent_pid: int
    rlimits: tuple[tuple[int, int, int], ...] = ()
    uid: int | None = None
    gid: int | None = None
    stage: tuple[tuple[str, str, int, int], ...] = ()
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
                raise OSError(self.calls.get_errno(), "prctl(PR_SET_PDEATHSIG)")
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
            raise OSError(c.get_errno(), "unshare(CLONE_NEWNS) to stage host paths")
        # Private first, or the staging mounts would propagate to the host's namespace.
        if c.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
            raise OSError(c.get_errno(), "making the staging namespace private")
        for source, target, dev, ino in self.stage:
            if c.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None) != 0:
                raise OSError(c.get_errno(), f"staging {source} at {target}")
            st = os.stat(target)
            if (st.st_dev, st.st_ino) != (dev, ino):
                raise OSError(0, f"{source} was replaced while it was being staged")

    def _report(self, message: str) -> None:
        if self.error_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.error_fd, message.encode(errors="replace")[:4000])


Rlimit = tuple[str, int, int]
"""``(resource name, soft, hard)``, e.g. ``("RLIMIT_NPROC", 64, 64)``."""

_PRLIMIT_FLAGS = {"RLIMIT_CORE": "--core", "RLIMIT_CPU": "--cpu", "RLIMIT_AS": "--as",
                  "RLIMIT_FSIZE": "--fsize", "RLIMIT_NPROC": "--nproc"}


def capped(wanted: list[Rlimit]) -> list[Rlimit]:
    """``wanted``, never above the current hard limits (an unprivileged process may only
    lower them)."""
    out = []
    for name, soft, hard in wanted:
        _, cur_hard = resource.getrlimit(getattr(resource, name))
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        out.append((name, min(soft, hard), hard))
    return out


def exec_chain(ids: tuple[int, int] | None, rlimits: list[Rlimit]) -> list[str] | None:
    """The argv prefix that drops to ``ids``, sets the parent-death signal, then lowers
    ``rlimits`` before exec'ing the command; None when ``setpriv`` or ``prlimit`` is not
    installed."""
    setpriv = shutil.which("setpriv")
    prlimit = shutil.which("prlimit") if rlimits else ""
    if setpriv is None or prlimit is None:
        return None
    chain = [setpriv]
    if ids is not None:
        chain += [f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups"]
    chain += ["--pdeathsig", "KILL", "--"]
    if rlimits:
        chain += [prlimit, *(f"{_PRLIMIT_FLAGS[n]}={soft}:{hard}" for n, soft, hard in rlimits),
                  "--"]
    return chain


def child_setup(ids: tuple[int, int] | None, rlimits: list[Rlimit],
                stage: tuple[tuple[str, str, int, int], ...] = ()) -> ChildSetup:
    """The :class:`ChildSetup` doing what :func:`exec_chain` does, staging included."""
    return ChildSetup(
        prepare(), os.getpid(),
        rlimits=tuple((getattr(resource, n), soft, hard) for n, soft, hard in rlimits),
        uid=ids[0] if ids else None, gid=ids[1] if ids else None, stage=stage,
    )


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
