"""``underway serve --workers N``: N server processes on one port.

The parent opens N listening sockets on the address, each with ``SO_REUSEPORT``, so the
kernel spreads new connections over them, then forks one worker per socket. Each worker
opens its own store (its own connections) and serves its app with uvicorn on its socket.
The parent holds the sockets and only supervises:

- SIGINT or SIGTERM: it asks every worker to stop (SIGTERM: uvicorn stops accepting,
  finishes the requests in progress, the worker closes its store), waits for them all and
  returns;
- a worker that dies while serving is started again on its socket (connections waiting on
  that socket are served by the new one); one that dies within :data:`START_GRACE` seconds
  of its start (it could not open its store, say) stops them all with an error.

Every worker must be given the same console session secret (the CLI makes one when
``[serve]`` names none), so a session signed by one worker is honoured by the others.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from types import FrameType

import uvicorn
from fastapi import FastAPI

from ..errors import ConfigurationError

START_GRACE = 5.0
"""Seconds after its start within which a worker's death stops the server."""
BACKLOG = 2048


def listening(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets listening on ``host:port`` (port 0: one port chosen for all), each
    with ``SO_REUSEPORT`` (one socket per worker: the kernel spreads connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    made: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            made.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(BACKLOG)
            sock.set_inheritable(True)
    except OSError:
        for sock in made:
            sock.close()
        raise
    return made


def serve_workers(
    make_app: Callable[[], AbstractContextManager[FastAPI]], *, host: str = "127.0.0.1",
    port: int = 8420, workers: int = 2, log_level: str = "info",
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve the app ``make_app`` gives in ``workers`` processes until SIGINT or SIGTERM
    (see the module).

    Args:
        make_app: Called in each worker process: a context manager that opens what the
            app needs (its store) and yields the app, and closes them after it stops.
        host: The address to listen on.
        port: The port to listen on.
        workers: How many processes.
        log_level: uvicorn's log level.
        sockets: Listening sockets to use, one per worker (default: :func:`listening`).

    Raises:
        ConfigurationError: ``workers`` is below 1, or a worker died as it started.
    """
    if workers < 1:
        raise ConfigurationError(f"--workers must be at least 1, not {workers}")
    socks = sockets if sockets is not None else listening(host, port, workers)
    children: dict[int, tuple[int, float]] = {}  # pid -> (socket index, started)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            _kill(pid, signal.SIGTERM)

    def start(index: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                for i, other in enumerate(socks):
                    if i != index:
                        other.close()
                _run(make_app, socks[index], log_level)
                code = 0
            except BaseException as exc:
                print(f"underway serve: worker {os.getpid()} failed: {exc!r}", file=sys.stderr)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = (index, time.monotonic())

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    failed: str | None = None
    try:
        for index in range(workers):
            start(index)
        while children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                break
            if pid not in children:
                continue
            index, began = children.pop(pid)
            if stopping:
                continue
            if time.monotonic() - began < START_GRACE:
                failed = (f"a worker exited as it started ({_described(status)}); "
                          "see its error above")
                stop(signal.SIGTERM, None)
                continue
            print(f"underway serve: worker {pid} ended ({_described(status)}); starting "
                  "another", file=sys.stderr)
            start(index)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for pid in list(children):
            _kill(pid, signal.SIGKILL)
        if sockets is None:
            for sock in socks:
                sock.close()
    if failed is not None:
        raise ConfigurationError(failed)


def _run(make_app: Callable[[], AbstractContextManager[FastAPI]], sock: socket.socket,
         log_level: str) -> None:
    with make_app() as app:
        config = uvicorn.Config(app, log_level=log_level, access_log=False)
        uvicorn.Server(config).run(sockets=[sock])


def _kill(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _described(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"status {os.waitstatus_to_exitcode(status)}"
