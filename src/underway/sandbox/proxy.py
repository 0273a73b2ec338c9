"""Network for a sandboxed command only to the hosts its profile lists.

A sandbox keeps its own, empty network namespace even then: the command cannot open a
connection to anything outside it. What it gets is an HTTP(S) proxy:

* on the host, :class:`EgressProxy` listens on a Unix socket in the call's private
  directory. It takes ``CONNECT host:port`` (HTTPS, or any TCP stream) and absolute-form
  HTTP requests (``GET http://host/path``), checks the host against the profile's
  ``hosts`` (:mod:`underway.egress`), refuses any other with ``403`` (and remembers the
  refusal for the command's result), and connects to an allowed one itself — name
  resolution happens on the host, so the sandbox needs no resolver either;
* in the sandbox, that socket is bound read-only at :data:`PROXY_SOCKET`, and the command
  runs under :data:`RELAY`, a few lines of the system's Python that listen on the
  sandbox's own loopback (``127.0.0.1:3128``) and pass each connection to the socket. The
  command's environment names the proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``
  and their lower-case forms), which curl, pip, requests, httpx and urllib follow.

A program that ignores the proxy variables reaches nothing: there is no route out.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..egress import host_allowed
from .errors import SandboxError
from .profile import PROXY_SOCKET

PROXY_PORT = 3128
"""The port the relay listens on, on the sandbox's own loopback."""
RELAY_PYTHON = "/usr/bin/python3"
"""The interpreter the relay runs with: the system's, which every sandbox sees."""
HEAD_LIMIT = 65_536
CONNECT_TIMEOUT_S = 10.0

RELAY = """\
import os, socket, subprocess, sys, threading
path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
def pipe(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve():
    while True:
        c, _ = srv.accept()
        u = socket.socket(socket.AF_UNIX)
        try:
            u.connect(path)
        except OSError:
            c.close()
            continue
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
threading.Thread(target=serve, daemon=True).start()
code = subprocess.call(argv)
sys.stdout.flush()
os._exit(code if code >= 0 else 128 - code)
"""
"""The relay, run as ``python3 -c RELAY SOCKET PORT ARGV...``: it exits with the
command's status (128 + the signal number when a signal ended it)."""


def relay_argv(argv: list[str]) -> list[str]:
    """``argv`` run under the relay."""
    if not os.path.exists(RELAY_PYTHON):
        raise SandboxError(f"the sandbox's egress proxy needs {RELAY_PYTHON} on the host "
                           "(the relay inside the sandbox runs with it)")
    return [RELAY_PYTHON, "-I", "-S", "-c", RELAY, PROXY_SOCKET, str(PROXY_PORT), *argv]


def proxy_env() -> dict[str, str]:
    """The variables that point a command at the relay."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
    return {**{n: url for n in names}, **{n.lower(): url for n in names}}


class EgressProxy:
    """The host side: an allow-listing proxy on a Unix socket at ``path``, serving one
    call (a context manager: listening inside, closed and removed after). ``refused``:
    each ``host:port`` it refused, in order."""

    def __init__(self, path: str, hosts: Iterable[str]) -> None:
        self.path = path
        self.hosts = tuple(hosts)
        self.refused: list[str] = []
        self._server = socket.socket(socket.AF_UNIX)
        self._thread = threading.Thread(target=self._serve, name="underway-egress",
                                        daemon=True)
        self._closing = False

    def __enter__(self) -> EgressProxy:
        self._server.bind(self.path)
        # The sandbox's user connects; the socket's directory keeps everyone else out.
        os.chmod(self.path, 0o666)
        self._server.listen(64)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing = True
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    def _serve(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            conn.settimeout(CONNECT_TIMEOUT_S)
            head, rest = _read_head(conn)
            line, _, headers = head.partition(b"\r\n")
            method, target, version = _request_line(line)
            host, port, path = _destination(method, target)
            if not host_allowed(host, self.hosts):
                self.refused.append(f"{host}:{port}")
                _answer(conn, 403, f"egress to {host} is not allowed: the sandbox profile "
                                   f"allows only {', '.join(self.hosts)}")
                return
            try:
                upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                _answer(conn, 502, f"cannot reach {host}:{port}: {exc}")
                return
            conn.settimeout(None)
            upstream.settimeout(None)
            if method == "CONNECT":
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream.sendall(rest)
            else:
                upstream.sendall(f"{method} {path} {version}".encode() + b"\r\n" + headers
                                 + rest)
            other = threading.Thread(target=_pipe, args=(upstream, conn), daemon=True)
            other.start()
            _pipe(conn, upstream)
            other.join()
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError):
                _answer(conn, 400, f"not a proxy request the sandbox serves: {exc}")
        finally:
            conn.close()
            if upstream is not None:
                upstream.close()


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ValueError("the connection closed before a request arrived")
        data += chunk
        if len(data) > HEAD_LIMIT:
            raise ValueError("the request head is too long")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _request_line(line: bytes) -> tuple[str, str, str]:
    parts = line.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ValueError(f"bad request line {line[:100]!r}")
    return parts[0].upper(), parts[1], parts[2]


def _destination(method: str, target: str) -> tuple[str, int, str]:
    """``(host, port, origin-form path)`` of a proxy request."""
    if method == "CONNECT":
        parts = urlsplit(f"//{target}")
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"CONNECT needs host:port, not {target!r}")
        return parts.hostname, parts.port, ""
    parts = urlsplit(target)
    if parts.scheme != "http" or parts.hostname is None:
        raise ValueError(f"a proxied request names an http:// URL, not {target!r} (use "
                         "CONNECT for https)")
    path = parts.path or "/"
    return parts.hostname, parts.port or 80, path + (f"?{parts.query}" if parts.query else "")


def _answer(conn: socket.socket, status: int, text: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = f"underway sandbox: {text}\n".encode()
    conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65_536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
