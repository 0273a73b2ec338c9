"""Running the app: :func:`serve` in the foreground (``underway serve``), or
:class:`ServerThread` in a thread of this process on an ephemeral port, for tests and
benchmarks, ready once ``/healthz`` answers."""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType

import uvicorn
from fastapi import FastAPI

from ..errors import ConfigurationError


def serve(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8420,
          log_level: str = "info") -> None:
    """Serve ``app`` until interrupted (SIGINT/SIGTERM end it gracefully).

    Args:
        app: The app.
        host: The address to listen on.
        port: The port to listen on.
        log_level: uvicorn's log level.
    """
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


class ServerThread:
    """``app`` served by uvicorn in a background thread on ``host`` and a free port.

    >>> with ServerThread(app) as server:  # doctest: +SKIP
    ...     httpx.get(server.url + "/healthz")

    Entering waits until ``/healthz`` answers. Leaving stops the server and waits for its
    thread.

    Args:
        app: The app.
        host: The address to listen on.
        ready_timeout: The most seconds entering waits.
        limit_concurrency: The most connections served at once; None means no limit.
    """

    def __init__(self, app: FastAPI, *, host: str = "127.0.0.1", ready_timeout: float = 30.0,
                 limit_concurrency: int | None = None) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.bind((host, 0))
        self.port: int = self._sock.getsockname()[1]
        """The port the server listens on."""
        self.url = f"http://{host}:{self.port}"
        """The server's base URL."""
        config = uvicorn.Config(app, log_level="warning", access_log=False,
                                limit_concurrency=limit_concurrency, backlog=512)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._sock]},
                                        name=f"underway-serve-{self.port}", daemon=True)
        self._ready_timeout = ready_timeout

    def start(self) -> None:
        """Start serving; return once ``/healthz`` answers 200."""
        # The client only waits for a server in this process: `underway serve` never does.
        import httpx

        self._thread.start()
        deadline = time.monotonic() + self._ready_timeout
        with httpx.Client(base_url=self.url, timeout=2.0) as http:
            while True:
                try:
                    if http.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if not self._thread.is_alive():
                    raise ConfigurationError(f"the server on {self.url} stopped while starting")
                if time.monotonic() > deadline:
                    self.stop()
                    raise ConfigurationError(
                        f"the server on {self.url} did not answer /healthz within "
                        f"{self._ready_timeout:g}s")
                self._thread.join(0.01)  # returns early if the server thread ends

    def stop(self) -> None:
        """Stop the server and wait for its thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self._sock.close()

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
