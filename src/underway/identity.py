"""Who holds a lease: process identities, and whether their process is still alive.

An owner id is ``host:space:pid:start``. ``space`` fingerprints the boot and the PID
namespace, so two containers or machines that share a host name never judge each other's
processes; ``start`` is the process start time, so a recycled pid is not mistaken for the
original holder.
"""

from __future__ import annotations

import hashlib
import os
import socket

__all__ = ["owner_is_dead", "worker_identity"]


def _read(path: str) -> str:
    # Read as bytes and decoded by the built-in Latin-1 codec (ASCII text reads the same):
    # a text-mode open would look up and import its codec in a process taking a run over.
    try:
        with open(path, "rb") as f:
            return f.read().decode("latin-1").strip()
    except OSError:
        return ""


_spaces: dict[int, str] = {}
"""This process's space, read once (by process id: a forked child reads its own)."""


def _space() -> str:
    pid = os.getpid()
    if (known := _spaces.get(pid)) is not None:
        return known
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    boot = _read("/proc/sys/kernel/random/boot_id")
    _spaces.clear()
    _spaces[pid] = found = hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12]
    return found


def _process_start(pid: int) -> str:
    stat = _read(f"/proc/{pid}/stat")
    return stat.rsplit(")", 1)[1].split()[19] if ")" in stat else "0"


def worker_identity() -> str:
    """This process's owner id: unique per process, checkable for liveness here."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{_space()}:{pid}:{_process_start(pid)}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` is a process of this host and PID namespace that is gone."""
    parts = owner.split(":")
    if len(parts) != 4 or not parts[2].isdigit():
        return False
    host, space, pid_s, start = parts
    if host != socket.gethostname() or space != _space():
        return False
    pid = int(pid_s)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return start != "0" and _process_start(pid) != start
