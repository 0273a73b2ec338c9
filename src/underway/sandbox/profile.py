"""What a sandbox allows: :class:`SandboxProfile` and its resource :class:`Limits`.

A profile is a frozen value. :meth:`SandboxProfile.describe` spells out exactly what a
command run under it can see and use (backend, mounts, network, limits, environment,
user); :meth:`SandboxProfile.digest` is the SHA-256 of that description's canonical JSON,
which the engine journals with each tool call so an audit can tell which rules a command
ran under.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from ..egress import host_patterns
from ..errors import ConfigurationError
from ..events import canonical_json
from ._mounts import HostPath, Mount, overlap, replaceable_mount
from .errors import SandboxError

__all__ = ["BACKENDS", "Backend", "Limits", "SandboxProfile"]

Backend = Literal["auto", "bwrap", "docker", "none"]
BACKENDS: tuple[Backend, ...] = ("auto", "bwrap", "docker", "none")

DESCRIBE_FORMAT = 1
"""Bumped whenever :meth:`SandboxProfile.describe` changes shape, so digests never collide
across versions."""

SYSTEM_RO = ("/usr",)
"""Host directories every sandbox sees read-only."""
ROOT_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Top-level directories recreated as the host has them: a symlink into /usr or a
read-only bind."""
ETC_RO = ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime", "/etc/ssl/certs")
"""The few /etc entries programs need to load and run; the rest of /etc stays hidden."""
ETC_NETWORK = (
    "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/host.conf",
)
"""Added when the profile allows the network: name resolution."""
RESERVED = ("/usr", "/etc", "/proc", "/dev", *ROOT_LINKS)
"""Sandbox paths a profile's own mounts may not replace or sit under. (``/tmp`` itself is
reserved too, but mounts may sit under it: they are made on top of the private /tmp.)"""

PROXY_SOCKET = "/run/underway-egress.sock"
"""Where the egress proxy's socket appears in a sandbox whose profile lists hosts."""

PYTHON_PREFIX = "python prefix"
"""What the mount of the interpreter's prefix (``python=True``) is called."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MIB = 1024 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """Resources one command may use. ``None`` leaves a limit off.

    ``cpu_seconds``: CPU time (SIGXCPU, then SIGKILL a second later). ``memory_mb``: address
    space of each process. ``file_size_mb``: largest file a process may write (SIGXFSZ).
    ``max_processes``: processes and threads of this command at once (the egress relay
    included), counted in the call's own user namespace, so other calls never count.
    ``timeout_s``: wall time, after which every process of the command is killed and the
    result says ``timed_out``. ``output_cap_bytes``: bytes kept of stdout and of stderr
    each; the rest is read and counted, never buffered. ``egress_connections``: egress
    proxy connections open at once (a profile with ``hosts``); more are refused with
    ``503``. ``tmp_size_mb``: size of the private ``/tmp``. ``cpus``: CPU share (Docker
    only; bubblewrap cannot cap the rate, only the CPU time). What a call reserves of
    its worker follows from these (see :class:`~underway.sandbox.WorkerLimits`).
    """

    cpu_seconds: int | None = 60
    memory_mb: int | None = 1024
    file_size_mb: int | None = 256
    max_processes: int | None = 64
    timeout_s: float = 60.0
    output_cap_bytes: int = 65_536
    tmp_size_mb: int = 64
    cpus: float | None = None
    egress_connections: int = 16

    def __post_init__(self) -> None:
        if not isinstance(self.egress_connections, int) or self.egress_connections < 1:
            raise ConfigurationError(
                f"sandbox limit egress_connections={self.egress_connections!r}: give a "
                "whole number of at least 1")
        for name in ("cpu_seconds", "memory_mb", "file_size_mb", "max_processes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigurationError(
                    f"sandbox limit {name}={value!r}: give a whole number of at least 1, "
                    "or None for no limit"
                )
        if not self.timeout_s > 0:
            raise ConfigurationError(f"sandbox limit timeout_s={self.timeout_s!r} must be > 0")
        if self.output_cap_bytes < 0:
            raise ConfigurationError(
                f"sandbox limit output_cap_bytes={self.output_cap_bytes!r} must be >= 0"
            )
        if self.tmp_size_mb < 1:
            raise ConfigurationError(f"sandbox limit tmp_size_mb={self.tmp_size_mb!r} must be >= 1")
        if self.cpus is not None and not self.cpus > 0:
            raise ConfigurationError(f"sandbox limit cpus={self.cpus!r} must be > 0 or None")

    def describe(self) -> dict[str, Any]:
        """The limits as JSON."""
        return {
            "cpu_seconds": self.cpu_seconds, "memory_mb": self.memory_mb,
            "file_size_mb": self.file_size_mb, "max_processes": self.max_processes,
            "timeout_s": self.timeout_s, "output_cap_bytes": self.output_cap_bytes,
            "tmp_size_mb": self.tmp_size_mb, "cpus": self.cpus,
        }

    def rlimits(self) -> list[tuple[str, int, int]]:
        """``(resource name, soft, hard)`` for ``setrlimit`` in the child."""
        out = [("RLIMIT_CORE", 0, 0)]
        if self.cpu_seconds is not None:
            # The soft limit sends SIGXCPU; the hard one a second later is SIGKILL.
            out.append(("RLIMIT_CPU", self.cpu_seconds, self.cpu_seconds + 1))
        if self.memory_mb is not None:
            out.append(("RLIMIT_AS", self.memory_mb * _MIB, self.memory_mb * _MIB))
        if self.file_size_mb is not None:
            out.append(("RLIMIT_FSIZE", self.file_size_mb * _MIB, self.file_size_mb * _MIB))
        if self.max_processes is not None:
            out.append(("RLIMIT_NPROC", self.max_processes, self.max_processes))
        return out


@dataclass(frozen=True, kw_only=True)
class SandboxProfile:
    """Where and how a command runs.

    ``backend``: ``"bwrap"`` (bubblewrap), ``"docker"``, ``"none"`` (no isolation; needs
    ``allow_unsandboxed=True`` or ``UNDERWAY_ALLOW_UNSANDBOXED=1``) or ``"auto"``: bubblewrap
    when usable, else Docker when an engine answers, else :class:`SandboxUnavailable`.
    ``network``: share the host's network (default: none at all, not even its loopback).
    ``hosts``: instead, reach only these hosts (``api.example.com``, ``*.bank.in``), over
    HTTP and HTTPS through an allow-listing proxy (:mod:`underway.sandbox._proxy`;
    bubblewrap only).
    ``ro_paths`` / ``rw_paths``: host paths to show at the same path, read-only or writable.
    ``workspace_dir``: where the call's workspace appears (the working directory and HOME).
    ``python``: show the host interpreter's prefix (``sys.base_prefix``) read-only, for the
    code tool. ``env_allow``: host environment variables passed through by name.
    ``uid`` / ``gid``: the unprivileged user a root process runs commands as; its limits
    on processes count every process of that user on the host. ``image``: the Docker image.

    The host paths (``ro_paths``, ``rw_paths``, the Python prefix) are resolved when the
    profile is made, each to the object it names then; every call binds that object or
    refuses to run (see :mod:`underway.sandbox._mounts`). A path that does not exist yet is
    resolved by the first call that finds it. None may lie inside a writable one, and no
    mount target inside a writable target.
    """

    backend: Backend = "auto"
    network: bool = False
    ro_paths: tuple[str, ...] = ()
    rw_paths: tuple[str, ...] = ()
    workspace_dir: str = "/workspace"
    python: bool = False
    limits: Limits = field(default_factory=Limits)
    env_allow: tuple[str, ...] = ()
    uid: int = 65534
    gid: int = 65534
    image: str = "python:3.11-slim"
    allow_unsandboxed: bool = False
    hosts: tuple[str, ...] = ()
    _pins: dict[str, HostPath] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigurationError(
                f"sandbox backend {self.backend!r} is unknown; choose one of {list(BACKENDS)}"
            )
        for name in ("ro_paths", "rw_paths", "env_allow"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ConfigurationError(
                    f"sandbox {name}={value!r} is a string; give a sequence of them"
                )
            object.__setattr__(self, name, tuple(value))
        for path in (*self.ro_paths, *self.rw_paths):
            _check_mount(path)
        object.__setattr__(self, "hosts", host_patterns(self.hosts, owner="sandbox hosts"))
        if self.hosts and self.network:
            raise ConfigurationError(
                "sandbox network=True shares the whole host network; hosts=[...] allows "
                "only those hosts: give one or the other")
        if self.hosts and self.backend in ("docker", "none"):
            raise ConfigurationError(
                f"sandbox hosts=[...] is enforced by bubblewrap only; backend "
                f"{self.backend!r} cannot keep a command to those hosts")
        if self.hosts:
            for path in (*self.ro_paths, *self.rw_paths, self.workspace_dir):
                if PROXY_SOCKET.startswith(path + "/") or path == PROXY_SOCKET:
                    raise ConfigurationError(
                        f"sandbox mount {path!r} would hide the egress proxy's socket at "
                        f"{PROXY_SOCKET}; mount it elsewhere")
        _check_mount(self.workspace_dir, what="workspace_dir")
        for name in self.env_allow:
            if not _ENV_NAME.match(name):
                raise ConfigurationError(f"sandbox env_allow entry {name!r} is not a variable name")
        for name in ("uid", "gid"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(
                    f"sandbox {name}={value!r}: give an unprivileged id (a whole number >= 1)"
                )
        if not isinstance(self.limits, Limits):
            raise ConfigurationError(f"sandbox limits={self.limits!r} is not a Limits")
        pins: dict[str, HostPath] = {}
        object.__setattr__(self, "_pins", pins)
        for what, path in self._paths():
            with contextlib.suppress(SandboxError):
                pins[path] = HostPath.resolve(path, what=what)
        problem = self.refusal()
        if problem is not None:
            raise ConfigurationError(f"sandbox profile refused: {problem}")

    def refusal(self, workspace: HostPath | None = None) -> str | None:
        """Why this profile (with ``workspace``, a resolved workspace directory) must not
        run anything, or None: a mount inside a writable one, or — when commands run as
        the profile's user (a root worker, or Docker) — a directory on the way to a mount
        that user could change. Paths not resolved yet are judged as written; every call
        judges again."""
        mounts = self._mounts(workspace or HostPath.unresolved("(the workspace)"),
                              resolve=False)
        problem = overlap(mounts, self.fixed_mounts())
        if problem is None and (os.geteuid() == 0 or self.backend == "docker"):
            problem = replaceable_mount(mounts, (self.uid, self.gid))
        return problem

    def _paths(self) -> list[tuple[str, str]]:
        """``(what, host path)`` of every path the profile binds, in mount order."""
        out = [(PYTHON_PREFIX, python_prefix())] if self.python else []
        out += [("ro_paths entry", p) for p in self.ro_paths]
        out += [("rw_paths entry", p) for p in self.rw_paths]
        return out

    def host_mounts(self, workspace: HostPath) -> list[Mount]:
        """The profile's mounts and the workspace's, in the order they are made, each
        source pinned (resolving now a path that was missing when the profile was made;
        :class:`SandboxError` when it still is)."""
        return self._mounts(workspace, resolve=True)

    def _mounts(self, workspace: HostPath, *, resolve: bool) -> list[Mount]:
        out = []
        for what, path in self._paths():
            pin = self._pins.get(path)
            if pin is None and resolve:
                pin = self._pins.setdefault(path, HostPath.resolve(path, what=what))
            elif pin is None:
                pin = HostPath.unresolved(path)
            out.append(Mount(what, pin, path, writable=what.startswith("rw")))
        out.append(Mount("the workspace", workspace, self.workspace_dir, writable=True))
        return out

    def fixed_mounts(self) -> list[tuple[str, str, str]]:
        """``(what, host source, target)`` of the system paths every sandbox binds
        read-only (resolved, as bubblewrap would find them now)."""
        etc = ETC_RO + (ETC_NETWORK if self.network else ())
        return [("system path", os.path.realpath(p), p) for p in (*SYSTEM_RO, *ROOT_LINKS, *etc)
                if os.path.lexists(p)]

    def mounts(self) -> list[dict[str, Any]]:
        """Every mount of the sandbox, in the order it is made: ``path`` inside, ``mode``
        (``ro``, ``rw``, ``tmpfs``, ``proc``, ``dev``) and the host ``source``."""
        out: list[dict[str, Any]] = [{"path": p, "mode": "ro", "source": p} for p in SYSTEM_RO]
        out += [{"path": p, "mode": "ro-or-link", "source": p} for p in ROOT_LINKS]
        etc = ETC_RO + (ETC_NETWORK if self.network else ())
        out += [{"path": p, "mode": "ro-if-present", "source": p} for p in etc]
        out.append({"path": "/tmp", "mode": "tmpfs", "source": None})
        out.append({"path": "/proc", "mode": "proc", "source": None})
        out.append({"path": "/dev", "mode": "dev", "source": None})
        if self.python:
            prefix = python_prefix()
            out.append({"path": prefix, "mode": "ro", "source": prefix})
        out += [{"path": p, "mode": "ro", "source": p} for p in self.ro_paths]
        out += [{"path": p, "mode": "rw", "source": p} for p in self.rw_paths]
        out.append({"path": self.workspace_dir, "mode": "rw", "source": "workspace"})
        if self.hosts:
            out.append({"path": PROXY_SOCKET, "mode": "socket", "source": "egress proxy"})
        return out

    def describe(self) -> dict[str, Any]:
        """The exact profile as JSON: what a command run under it sees and may use."""
        return {
            "format": DESCRIBE_FORMAT,
            "backend": self.backend,
            "network": self.network,
            "mounts": self.mounts(),
            "root": "read-only",
            "limits": self.limits.describe(),
            "env_allow": sorted(self.env_allow),
            "user": {"uid": self.uid, "gid": self.gid},
            "image": self.image,
            "allow_unsandboxed": self.allow_unsandboxed,
            # Only when given, so the digests of profiles without hosts stay as they were.
            **({"hosts": list(self.hosts),
                "egress_connections": self.limits.egress_connections} if self.hosts else {}),
        }

    @functools.cached_property
    def _digest(self) -> str:
        return hashlib.sha256(canonical_json(self.describe())).hexdigest()

    def digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON of :meth:`describe`."""
        return self._digest


def python_prefix() -> str:
    """The prefix of the interpreter running this process, as the code tool shows it."""
    return os.path.realpath(sys.base_prefix)


def _check_mount(path: str, *, what: str = "mount") -> None:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigurationError(f"sandbox {what} {path!r} must be an absolute path")
    if os.path.normpath(path) != path or path == "/":
        raise ConfigurationError(
            f"sandbox {what} {path!r} must be a normalized path other than '/' "
            "(no trailing slash, '.', '..' or '//')"
        )
    if path == "/tmp":
        raise ConfigurationError(
            f"sandbox {what} '/tmp' would replace the sandbox's private /tmp; mount a "
            "directory under it or elsewhere"
        )
    for reserved in RESERVED:
        if path == reserved or path.startswith(reserved + "/"):
            raise ConfigurationError(
                f"sandbox {what} {path!r} would replace or sit under {reserved}, which the "
                "sandbox provides itself; choose another path"
            )
