"""``underway serve`` as a user starts it: another process, on a free port, ready once
``/healthz`` answers (a condition, not a delay)."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

UNDERWAY = Path(sys.executable).with_name("underway")


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serve(db: str, *, ready_within: float = 120, options: Sequence[str] = ()
          ) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``underway serve`` on ``db`` (with more ``options``): its URL and process once
    ``/healthz`` answers; stopped (SIGTERM, then SIGKILL if it lingers) when the block ends,
    unless it ended already."""
    port = free_port()
    server = subprocess.Popen([str(UNDERWAY), "--db", db, "serve", "--port", str(port),
                               "--log-level", "warning", *options],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_within
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            assert server.poll() is None, server.communicate()
            assert time.monotonic() < deadline, "underway serve did not answer /healthz"
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(0.05)
        yield url, server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        server.communicate(timeout=60)
