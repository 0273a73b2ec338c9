"""Escapes through the network: a TCP server on the host's loopback and an abstract unix
socket."""

from __future__ import annotations

import socket
import threading

from ..profile import SandboxProfile
from ._catalogue import Verdict, escape, output_of, run_bash, run_python
from ._host import marker


@escape("loopback_tcp", "connect to a TCP server listening on the host's loopback")
async def loopback_tcp(profile: SandboxProfile) -> Verdict:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            accepted.append(f"{peer[0]}:{peer[1]}")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        r = await run_bash(profile, (
            f"for h in 127.0.0.1 localhost; do (exec 3<>/dev/tcp/$h/{port}) 2>&1 "
            "&& echo CONNECTED $h; done; true"
        ))
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    reached = bool(accepted) or "CONNECTED" in r.stdout
    return Verdict(not reached,
                   (f"server accepted {accepted}; " if accepted else "") + output_of(r))


@escape("abstract_unix_socket", "connect to an abstract unix socket the host listens on")
async def abstract_unix_socket(profile: SandboxProfile) -> Verdict:
    name = marker()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(8)
    server.setblocking(False)
    try:
        r = await run_python(profile, (
            "import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect('\\0{name}'); print('CONNECTED')"
        ))
        try:
            conn, _ = server.accept()
            conn.close()
            accepted = True
        except BlockingIOError:
            accepted = False
    finally:
        server.close()
    reached = accepted or "CONNECTED" in r.stdout
    return Verdict(not reached, ("host socket reached; " if reached else "") + output_of(r))

