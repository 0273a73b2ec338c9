"""The host's side of an attempt: bait planted where the sandbox must not reach, and the
host's own view of which processes a command left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path


def marker() -> str:
    """A string no process on the host has in its argv yet."""
    return f"underway-escape-{uuid.uuid4().hex[:12]}"


LAUNCHERS = frozenset({b"bwrap", b"docker", b"timeout"})
"""Programs that start a sandbox from the host side (bubblewrap, Docker's client, and the
``timeout`` that keeps the time limit in front of bubblewrap): they carry the command in
their argv but run outside the sandbox, so they are not the sandboxed command's
processes."""


def processes_with(text: str) -> list[int]:
    """Host pids whose command line contains ``text`` (launchers excepted)."""
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if needle in cmdline and os.path.basename(cmdline.split(b"\0")[0]) not in LAUNCHERS:
            found.append(int(entry))
    return found


@contextlib.contextmanager
def host_dir() -> Iterator[Path]:
    """A world-readable directory on the host, outside anything the sandbox mounts."""
    path = Path(tempfile.mkdtemp(prefix="underway-escape-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
