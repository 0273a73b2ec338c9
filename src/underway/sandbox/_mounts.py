"""What a sandbox binds from the host, pinned: :class:`HostPath` and :class:`Mount`.

A sandboxed command may write its workspace and the profile's ``rw_paths``, and whatever
it leaves there outlives the call. So nothing a call binds may be chosen by reading a
path the command could have changed. Three rules make that hold:

- **Resolved once.** A profile's paths are resolved when the profile is made (a path
  missing then, at the first call that finds it), a tool's workspace when the tool is
  made: the real path, its device and inode are recorded in a :class:`HostPath`.
- **Verified at every call, bound by descriptor.** Each call opens the recorded real path
  again one component at a time without following any symlink (``O_PATH | O_NOFOLLOW``),
  checks device and inode against the record, and hands bubblewrap the open descriptor,
  not the path (``--bind-fd``; bubblewrap checks again after mounting). A symlink, a
  hardlink, a renamed directory or any other object at the path makes the call refuse.
- **Out of reach of every sandbox.** No bound path may lie inside a writable one (the
  workspace or an ``rw_paths`` entry), and no mount target inside a writable target: see
  :func:`overlap`. When commands run as a sandbox user (a root worker, or Docker), no
  directory on the way to a bound path may be one that user could change: see
  :func:`replaceable`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import SandboxError

_MAX_LINKS = 40
"""Symlinks one resolution follows at most, as the kernel does."""


@dataclass(frozen=True, slots=True)
class HostPath:
    """A host path resolved to one object: ``path`` as configured, ``real`` (no symlinks),
    that object's ``dev``, ``ino`` and whether it ``is_dir``, and ``via``: where the
    symlinks the resolution followed lie (each can be re-pointed by whoever may write
    there, so each is judged like ``real``)."""

    path: str
    real: str
    dev: int
    ino: int
    is_dir: bool
    via: tuple[str, ...] = ()

    @classmethod
    def resolve(cls, path: str | os.PathLike[str], *, what: str) -> HostPath:
        """Resolve ``path`` now; :class:`SandboxError` when it does not exist. ``what``
        names it in errors (``"ro_paths entry"``, ``"workspace"``)."""
        given = os.fspath(path)
        try:
            real, via = _resolve(os.path.join(os.getcwd(), given))
            fd = _open_nofollow(real)
        except OSError as exc:
            raise SandboxError(
                f"sandbox {what} {given!r} does not exist on this host ({exc.strerror})"
            ) from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return cls(given, real, st.st_dev, st.st_ino, stat.S_ISDIR(st.st_mode), via)

    @property
    def places(self) -> tuple[str, ...]:
        """Every host location that decided what this names: ``real`` and ``via``."""
        return (self.real, *self.via)

    @classmethod
    def unresolved(cls, path: str) -> HostPath:
        """A stand-in for ``path`` before it exists: judged as written, never opened."""
        return cls(path, path if path.startswith("/") else "/\0" + path, -1, -1, True)

    @property
    def resolved(self) -> bool:
        """Whether this names an object found on the host (not a stand-in)."""
        return self.ino >= 0

    def open(self, *, what: str) -> int:
        """A fresh ``O_PATH`` descriptor of the recorded object, reached without following
        a symlink; :class:`SandboxError` when the path no longer leads to it."""
        try:
            fd = _open_nofollow(self.real)
        except OSError as exc:
            raise self._changed(what, f"it can no longer be reached ({exc.strerror})") from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            os.close(fd)
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "another object"
            raise self._changed(what, f"{self.real} is now {kind}")
        return fd

    def _changed(self, what: str, why: str) -> SandboxError:
        return SandboxError(
            f"sandbox {what} {self.path!r} is not what it was when it was resolved: {why}. "
            "The command was not run. Something replaced it (a command with write access "
            "to a directory on its way can do that); check the host, then make the profile "
            "or tool again to accept what is there now"
        )


@dataclass(frozen=True, slots=True)
class Mount:
    """One host object bound into the sandbox: ``source`` shown at ``target``."""

    what: str
    source: HostPath
    target: str
    writable: bool


def overlap(mounts: Sequence[Mount],
            fixed: Sequence[tuple[str, str, str | None]] = ()) -> str | None:
    """Why these mounts are unsafe, or None.

    A writable mount's source may not hold (or be) the source of any other mount, nor any
    ``fixed`` ``(what, host path, target or None)`` the sandbox relies on (system paths,
    the call's private directory): a command could replace that source with a symlink for
    the next call. A writable mount's target may not hold any other target: mounting at
    it would follow what a command left there.
    """
    for w in (m for m in mounts if m.writable):
        others: list[tuple[str, str, tuple[str, ...], str | None]] = [
            (m.what, m.source.path, m.source.places, m.target) for m in mounts if m is not w]
        others += [(what, src, (src,), target) for what, src, target in fixed]
        for what, given, places, target in others:
            real = next((p for p in places if _within(p, w.source.real)), None)
            if real is not None:
                return (f"{what} {given!r} (on the host {real}) lies inside {w.what} "
                        f"{w.source.path!r} ({w.source.real}), which the sandbox can write: a "
                        "command could swap it for a symlink to any host path before the next "
                        f"call. Move it out, or reach it through {w.what} alone")
            if target is not None and _within(target, w.target):
                return (f"{what} is mounted at {target}, inside {w.what} at {w.target}, which "
                        "the sandbox can write: a command could leave a symlink there for the "
                        "next mount to follow. Choose a target outside it")
    return None


def replaceable(real: str, uid: int, gid: int, *, last_owned: bool = True) -> str | None:
    """The first directory entry on the way to ``real`` that a process with ``uid`` /
    ``gid`` (no other groups, no capabilities) could rename, remove or replace, or None.

    Judged by mode bits: an entry can be changed by whoever may write its parent, except
    that in a sticky directory only the directory's owner can change others' entries. The
    last entry is judged by its parent's bits only when ``last_owned`` (its own owner may
    be the sandbox user: a workspace is handed to it); the pin catches anything else that
    replaces it.
    """
    parts = [p for p in real.split("/") if p]
    parent = "/"
    for i, name in enumerate(parts):
        here = os.path.join(parent, name)
        try:
            pst = os.stat(parent)
            st = os.lstat(here)
        except OSError:
            return None  # the pin fails on it instead
        if _may_write(pst, uid, gid):
            sticky = bool(pst.st_mode & stat.S_ISVTX)
            exempt = last_owned and i == len(parts) - 1
            if not sticky or pst.st_uid == uid or (st.st_uid == uid and not exempt):
                return here
        parent = here
    return None


def replaceable_mount(mounts: Sequence[Mount], ids: tuple[int, int]) -> str | None:
    """Why a sandbox user with ``ids`` could change what one of ``mounts`` binds (see
    :func:`replaceable`), or None."""
    for m in (m for m in mounts if m.source.resolved):
        entry = replaceable(m.source.real, *ids) or next(
            (e for e in (replaceable(v, *ids, last_owned=False) for v in m.source.via) if e),
            None)
        if entry is not None:
            return (f"{m.what} {m.source.path!r}: the sandbox user (uid {ids[0]}) may change "
                    f"{entry}, on the way to it, so a command could replace what later calls "
                    "mount. Keep every directory above a mounted path out of that user's reach")
    return None


def _may_write(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IWUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IWGRP)
    return bool(st.st_mode & stat.S_IWOTH)


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _resolve(path: str) -> tuple[str, tuple[str, ...]]:
    """``path`` with every symlink resolved as the kernel would (``..`` after a symlink
    climbs from its target), and where each symlink followed lies."""
    pending = [p for p in path.split("/") if p]
    current, via = "/", list[str]()
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        here = os.path.join(current, name)
        if not stat.S_ISLNK(os.lstat(here).st_mode):
            current = here
            continue
        if len(via) >= _MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        via.append(here)
        target = os.readlink(here)
        pending[:0] = [p for p in target.split("/") if p]
        if target.startswith("/"):
            current = "/"
    return current, tuple(via)


def _open_nofollow(real: str) -> int:
    """``real`` opened with ``O_PATH``, one component at a time, never following a
    symlink: a symlink on the way fails (ENOTDIR), a symlink at the end is opened as
    itself."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in (p for p in real.split("/") if p):
            if part == "..":
                raise OSError(0, "'..' in a resolved path")
            nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    return fd
