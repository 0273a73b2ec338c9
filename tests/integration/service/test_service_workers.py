"""``underway serve --workers 2`` as a user runs it: two server processes on one port, each
with its own store. Connections land on both (which process holds a connection is read
from /proc), signals sent through both are each applied once, and SIGTERM stops them all.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from fakes import serving
from underway.apikeys import issue_key
from underway.runner import Runner

CONNECTIONS = 24
RUNS = 3


class Pokes(BaseModel):
    n: int = 0


waiter: uw.Flow[Pokes, Any] = uw.Flow("workers_waiter", state=Pokes, signals=["poke"])


@waiter.step
async def wait(ctx: uw.RunContext[Pokes, Any]) -> Any:
    return ctx.wait("poke", then=wait)


def _exchange(sock: socket.socket, method: str, path: str, token: str = "",
              body: Any = None) -> tuple[int, Any]:
    """One request on a keep-alive connection, and its status and JSON answer."""
    data = b"" if body is None else json.dumps(body).encode()
    head = [f"{method} {path} HTTP/1.1", "Host: test", f"Content-Length: {len(data)}"]
    if token:
        head.append(f"Authorization: Bearer {token}")
    if body is not None:
        head.append("Content-Type: application/json")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + data)
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(65536)
    header, _, rest = received.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(header[9:12]), json.loads(rest)


def _owners(server_pid: int, port: int) -> dict[int, int]:
    """Each server-side connection on ``port``, by the client's port: the pid of the
    server's child process that holds it."""
    children = [int(p) for p in
                Path(f"/proc/{server_pid}/task/{server_pid}/children").read_text().split()]
    inode_of: dict[str, int] = {}  # the socket's inode -> the client's port
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                inode_of[inode] = int(remote.rsplit(":", 1)[1], 16)
    owners: dict[int, int] = {}
    for pid in children:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inode_of:
                owners[inode_of[target[8:-1]]] = pid
    return owners


def test_two_workers_share_the_port_and_apply_each_signal_once(db_url: str) -> None:
    clock = uw.ManualClock(time.time())
    client = uw.Client.connect(db_url, clock=clock)
    try:
        engine = uw.Engine(client.store, flows=[waiter], clock=clock)
        runs = [client.start(waiter.name, None, tenant_id="acme")[0] for _ in range(RUNS)]
        asyncio.run(Runner(engine).run_until_idle())
        token = issue_key(client.store, tenant_id="acme", role="operator", name="ops",
                          now=clock.now()).token
        conns: list[socket.socket] = []
        with serving.serve(db_url, options=("--workers", "2")) as (url, server):
            port = int(url.rsplit(":", 1)[1])
            for _ in range(CONNECTIONS):
                sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                conns.append(sock)
                assert _exchange(sock, "GET", "/healthz")[0] == 200
            owners = _owners(server.pid, port)
            held = [owners[sock.getsockname()[1]] for sock in conns]
            # The kernel spreads connections over both workers' sockets.
            assert len(set(held)) == 2, held

            # Each signal twice, through connections held by different workers.
            first = {pid: [s for s, p in zip(conns, held, strict=True) if p == pid]
                     for pid in set(held)}
            a, b = (first[pid] for pid in sorted(first))
            delivered: dict[str, list[bool]] = {}
            for i in range(2 * CONNECTIONS):
                run_id, signal_id = runs[i % RUNS], f"poke-{i}"
                for via in (a[i % len(a)], b[i % len(b)]):
                    status, answer = _exchange(via, "POST", f"/v1/runs/{run_id}/signals",
                                               token, {"name": "poke", "signal_id": signal_id,
                                                       "payload": i})
                    assert status == 202, answer
                    delivered.setdefault(signal_id, []).append(answer["delivered"])
            assert all(sorted(flags) == [False, True] for flags in delivered.values())
            # And reads through either worker see the same run.
            for via in (a[0], b[0]):
                status, answer = _exchange(via, "GET", f"/v1/runs/{runs[0]}", token)
                assert status == 200 and answer["run_id"] == runs[0]
            for sock in conns:
                sock.close()
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=120)
            # Stopped gracefully: the parent waited for both workers (reaped: gone).
            assert server.returncode == 0, err
            assert not [pid for pid in set(held) if Path(f"/proc/{pid}").exists()]
        # Every signal is in its run's inbox once.
        inbox = sorted(s.signal_id for r in runs
                       for s in client.store.pending_signals("acme", r))
        assert inbox == sorted(f"poke-{i}" for i in range(2 * CONNECTIONS))
    finally:
        client.close()
