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

What the proxy spends is the worker's, so it is bounded per call. It runs on the call's
own event loop: no thread per connection. It keeps at most the call's
``egress_connections`` open (reserved from the worker's budget when the call was
admitted, :mod:`underway.sandbox._budget`). It takes connections off its socket itself,
at most :data:`ACCEPT_BATCH` a turn of the loop: one past the limit is answered ``503``
and closed right there, so it holds no task, transport or descriptor, and the result
says the limit was reached. A connection keeps its place until its descriptor is
closed. A request head must
arrive within :data:`HEAD_TIMEOUT_S` and fit in :data:`HEAD_LIMIT`; each direction of a
connection buffers at most a few times :data:`CHUNK`; names resolve on the budget's own
threads; and every connection ends with the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..egress import host_allowed
from ._budget import Budget
from .errors import SandboxError
from .profile import PROXY_SOCKET

PROXY_PORT = 3128
"""The port the relay listens on, on the sandbox's own loopback."""
RELAY_PYTHON = "/usr/bin/python3"
"""The interpreter the relay runs with: the system's, which every sandbox sees."""
HEAD_LIMIT = 65_536
"""Longest request head the proxy reads (request line and headers)."""
HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to send its whole request head."""
CONNECT_TIMEOUT_S = 10.0
"""How long resolving and connecting to an allowed host may take."""
CHUNK = 65_536
BACKLOG = 128
"""Connections the proxy's socket queues before it takes them."""
ACCEPT_BATCH = 32
"""Connections the proxy takes in one turn of the event loop, before other work runs."""
LINGER_S = 5.0
"""How long an ended connection may take to deliver its last bytes to the sandbox."""
ACCEPT_RETRY_S = 0.5
"""How long the proxy stops taking connections when the worker has no descriptor left
(sooner when one of its own connections ends)."""
REFUSALS_KEPT = 100
"""How many refused destinations a result lists (the rest are counted)."""

RELAY = """\
import os, selectors, socket, subprocess, sys, threading
path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(128)
srv.setblocking(False)
sel = selectors.DefaultSelector()
R, W = selectors.EVENT_READ, selectors.EVENT_WRITE
peer, out, eof, reg, gone = {}, {}, set(), set(), set()
def update(s):
    ev = (R if s not in eof and len(out[peer[s]]) < 262144 else 0) | (W if out[s] else 0)
    if ev and s in reg:
        sel.modify(s, ev)
    elif ev:
        sel.register(s, ev)
        reg.add(s)
    elif s in reg:
        sel.unregister(s)
        reg.discard(s)
def drop(s):
    for x in (s, peer.get(s)):
        if x in peer:
            if x in reg:
                sel.unregister(x)
                reg.discard(x)
            x.close()
            del peer[x], out[x]
            eof.discard(x)
            gone.discard(x)
def accept():
    try:
        c, _ = srv.accept()
    except OSError:
        return
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(path)
    except OSError:
        c.close()
        u.close()
        return
    for a, b in ((c, u), (u, c)):
        a.setblocking(False)
        peer[a], out[a] = b, b""
    update(c)
    update(u)
def serve():
    sel.register(srv, R)
    while True:
        for key, ev in sel.select():
            s = key.fileobj
            if s is srv:
                accept()
                continue
            if s not in peer:
                continue
            p = peer[s]
            try:
                if ev & W:
                    try:
                        out[s] = out[s][s.send(out[s]):]
                    except OSError:
                        # s takes nothing more (the proxy refused and closed): what was
                        # for it is dropped, and its answer still reaches the other side.
                        gone.add(s)
                        out[s] = b""
                    if not out[s] and p in eof and s not in gone:
                        s.shutdown(socket.SHUT_WR)
                if ev & R:
                    try:
                        data = s.recv(65536)
                    except ConnectionResetError:
                        data = b""
                    if data:
                        if p not in gone:
                            out[p] += data
                    else:
                        eof.add(s)
                        if not out[p] and p not in gone:
                            p.shutdown(socket.SHUT_WR)
            except OSError:
                drop(s)
                continue
            if s in eof and p in eof and not out[s] and not out[p]:
                drop(s)
                continue
            update(s)
            update(p)
threading.Thread(target=serve, daemon=True).start()
code = subprocess.call(argv)
sys.stdout.flush()
os._exit(code if code >= 0 else 128 - code)
"""
"""The relay, run as ``python3 -c RELAY SOCKET PORT ARGV...``: one thread moves every
connection's bytes (a selector loop, so connections cost the call no processes), and the
relay exits with the command's status (128 + the signal number when a signal ended it)."""


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
    """The host side: an allow-listing proxy on a Unix socket, serving one call.

    An async context manager: listening inside, and on exit every connection closed and
    the socket removed.

    Args:
        path: where the socket is made.
        hosts: the patterns of the hosts allowed.
        connections: connections open at once; more are refused with ``503``.
        budget: the worker's budget, whose threads resolve names.

    ``refused``: the first :data:`REFUSALS_KEPT` ``host:port`` refused, in order.
    ``limits_reached``: a sentence for each limit the command ran into.
    """

    def __init__(self, path: str, hosts: Iterable[str], *, connections: int,
                 budget: Budget) -> None:
        self.path = path
        self.hosts = tuple(hosts)
        self.connections = connections
        self.refused: list[str] = []
        self._refused_more = 0
        self._over_limit = 0
        self._budget = budget
        self._open: set[asyncio.Task[None]] = set()
        self._closing = False
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reading = False
        self._retry: asyncio.TimerHandle | None = None
        self._limit_answer = _answer_bytes(
            503, f"egress connections limit {connections} reached: the sandbox profile "
                 "allows that many open connections at once (Limits.egress_connections)")

    @property
    def limits_reached(self) -> tuple[str, ...]:
        """Each limit the command ran into, with how often."""
        out = []
        if self._over_limit:
            out.append(f"egress connections limit {self.connections} reached: "
                       f"{self._over_limit} connections refused")
        if self._refused_more:
            out.append(f"egress refusals listed limit {REFUSALS_KEPT} reached: "
                       f"{self._refused_more} more refused")
        return tuple(out)

    async def __aenter__(self) -> EgressProxy:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            # The sandbox's user connects; the socket's directory keeps everyone else out.
            os.chmod(self.path, 0o666)
            sock.listen(BACKLOG)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._listener = sock
        self._loop = asyncio.get_running_loop()
        self._listen()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closing = True
        self._pause()
        if self._retry is not None:
            self._retry.cancel()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)

    @property
    def open_connections(self) -> int:
        """Connections being served now (never more than ``connections``)."""
        return len(self._open)

    @property
    def accepting(self) -> bool:
        """Whether the proxy takes connections now: False once the call ends, and for a
        moment when the worker has no descriptor left (the connections wait meanwhile)."""
        return self._reading

    def _listen(self) -> None:
        if (self._loop is not None and self._listener is not None and not self._reading
                and not self._closing):
            self._loop.add_reader(self._listener.fileno(), self._accept)
            self._reading = True

    def _pause(self) -> None:
        if self._loop is not None and self._listener is not None and self._reading:
            self._loop.remove_reader(self._listener.fileno())
            self._reading = False

    def _accept(self) -> None:
        """Take what the listening socket holds, at most :data:`ACCEPT_BATCH` a turn.

        A connection within the limit becomes a task. One past it is answered ``503``
        and closed right here, without awaiting anything: it holds no task, no
        transport and no descriptor once this returns. So a flood costs the worker a
        few microseconds a connection and never more descriptors than the limit allows;
        the batch lets the loop's other calls run between turns.
        """
        assert self._listener is not None and self._loop is not None
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # Out of descriptors (EMFILE, ENFILE) or memory: leave the connections
                # waiting in the backlog until one of ours ends, or a moment passes.
                self._pause()
                self._retry = self._loop.call_later(ACCEPT_RETRY_S, self._listen)
                return
            if len(self._open) >= self.connections:
                self._over_limit += 1
                _refuse_now(conn, self._limit_answer)
                continue
            task = self._loop.create_task(self._serve_socket(conn))
            self._open.add(task)
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._open.discard(task)
        self._listen()

    async def _serve_socket(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=HEAD_LIMIT)
        except BaseException:
            conn.close()
            raise
        upstream: list[asyncio.StreamWriter] = []
        try:
            await self._serve(reader, writer, upstream)
        except (OSError, ValueError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, TimeoutError) as exc:
            with contextlib.suppress(OSError):
                _answer(writer, 400, f"not a proxy request the sandbox serves: "
                                     f"{_why(exc)}")
        finally:
            for up in upstream:
                up.transport.abort()  # its bytes were drained, or the call is over
            writer.close()  # flushes an answer first
            try:
                # The connection keeps its place until its descriptor is closed: a
                # sandbox that never reads what it is sent holds its own slot, no other.
                # At the call's end the sandbox is gone, and nothing waits.
                if not self._closing:
                    async with asyncio.timeout(LINGER_S):
                        await writer.wait_closed()
            except (OSError, TimeoutError):
                pass
            finally:
                writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     upstream: list[asyncio.StreamWriter]) -> None:
        """Serve one connection (``upstream`` gets the upstream's writer, once connected)."""
        async with asyncio.timeout(HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        line, _, headers = head.partition(b"\r\n")
        method, target, version = _request_line(line)
        host, port, path = _destination(method, target)
        if not host_allowed(host, self.hosts):
            self._refuse(f"{host}:{port}")
            _answer(writer, 403, f"egress to {host} is not allowed: the sandbox profile "
                                 f"allows only {', '.join(self.hosts)}")
            return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                up_reader, up_writer = await self._connect(host, port)
        except (OSError, TimeoutError) as exc:
            _answer(writer, 502, f"cannot reach {host}:{port}: {_why(exc)}")
            return
        upstream.append(up_writer)
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(f"{method} {path} {version}".encode() + b"\r\n" + headers)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _connect(self, host: str, port: int,
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            ipaddress.ip_address(host)
            addresses = [(host, port)]
        except ValueError:
            found = await self._budget.resolve(host, port)
            addresses = [(str(info[4][0]), port) for info in found]
        last: OSError = OSError(f"{host} has no address")
        for address, p in addresses:
            try:
                return await asyncio.open_connection(address, p, limit=CHUNK)
            except OSError as exc:
                last = exc
        raise last

    def _refuse(self, where: str) -> None:
        if len(self.refused) < REFUSALS_KEPT:
            self.refused.append(where)
        else:
            self._refused_more += 1


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, asyncio.LimitOverrunError):
        return f"the request head is longer than {HEAD_LIMIT} bytes"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the connection closed before a request arrived"
    return str(exc) or type(exc).__name__


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


def _answer_bytes(status: int, text: str) -> bytes:
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway",
              503: "Service Unavailable"}[status]
    body = f"underway sandbox: {text}\n".encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)


def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    writer.write(_answer_bytes(status, text))


def _refuse_now(conn: socket.socket, answer: bytes) -> None:
    """Answer ``conn`` and close it, without waiting for anything.

    A fresh socket's send buffer takes the short answer whole. What the sandbox already
    sent is read and dropped first: a Unix socket closed with unread bytes resets its
    peer, which could then lose the answer.
    """
    with contextlib.suppress(OSError):
        conn.setblocking(False)
        conn.send(answer)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(HEAD_LIMIT)
    conn.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except OSError:
        pass
