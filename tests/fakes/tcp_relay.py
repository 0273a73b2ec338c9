"""A TCP relay in front of a server, whose open connections a test can cut: a network that
drops a client's connection mid-answer, while new connections go through."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from urllib.parse import urlsplit


class Relay:
    """Relays ``http://127.0.0.1:<port>`` (:attr:`url`) to ``target`` (an ``http://`` URL).

    Args:
        target: The server's URL.
    """

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        self._to = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted = 0
        """Connections made through the relay so far."""
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return  # closed
            far = socket.create_connection(self._to)
            with self._lock:
                self.accepted += 1
                self._open += [near, far]
            threading.Thread(target=_pump, args=(near, far), daemon=True).start()
            threading.Thread(target=_pump, args=(far, near), daemon=True).start()

    def cut(self) -> None:
        """Close every connection open through the relay, both ways."""
        with self._lock:
            found, self._open = self._open, []
        for s in found:
            _shut(s)

    def close(self) -> None:
        """Stop accepting, and cut what is open."""
        self._listener.close()
        self.cut()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass  # the other side or a cut closed it
    finally:
        _shut(src)
        _shut(dst)


def _shut(s: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        s.shutdown(socket.SHUT_RDWR)
    s.close()
