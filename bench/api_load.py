"""The load generator of ``bench/api.py``: a process of its own that holds keep-alive HTTP/1.1
connections to a server and sends requests on each, one at a time, for a fixed time.

It speaks HTTP/1.1 itself over asyncio streams (requests are pre-built bytes, responses are
read by their ``Content-Length``), so it costs the CPU of a few system calls per request: far
less than the servers it measures. ``bench/api.py`` starts several of them and drives them
through their standard input, one JSON command a line; each answers one JSON line: the
latencies of the requests it timed, how many it sent, how many were answered in all
(warm-up included), and its own CPU seconds.

Command: ``{"host", "port", "method", "paths", "headers", "body", "connections",
"warmup", "seconds"}``; a POST's ``body`` is a JSON object to which each request adds a
unique ``signal_id``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any


def _request(method: str, path: str, headers: dict[str, str], body: bytes | None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: bench"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return head + (body or b"")


async def _one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               request: bytes) -> int:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def _run(cmd: dict[str, Any]) -> dict[str, Any]:
    paths: list[str] = cmd["paths"]
    headers: dict[str, str] = cmd["headers"]
    body: dict[str, Any] | None = cmd["body"]
    tag = uuid.uuid4().hex[:8]
    conns = [await asyncio.open_connection(cmd["host"], cmd["port"])
             for _ in range(cmd["connections"])]
    latencies: list[float] = []
    failures: list[str] = []
    sent = 0
    answered = 0
    start = time.perf_counter() + cmd["warmup"]
    stop = start + cmd["seconds"]

    async def client(n: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        nonlocal sent, answered
        i = 0
        while True:
            path = paths[(n + i * len(conns)) % len(paths)]
            payload = None if body is None else json.dumps(
                {**body, "signal_id": f"{tag}-{n}-{i}"}).encode()
            i += 1
            began = time.perf_counter()
            if began >= stop:
                return
            status = await _one(reader, writer, _request(cmd["method"], path, headers, payload))
            ended = time.perf_counter()
            answered += 1
            if status >= 300 and len(failures) < 5:
                failures.append(f"{cmd['method']} {path}: {status}")
            if began >= start and ended <= stop:
                latencies.append(ended - began)
                sent += 1

    cpu = time.process_time()
    await asyncio.gather(*(client(n, r, w) for n, (r, w) in enumerate(conns)))
    cpu = time.process_time() - cpu
    for _, writer in conns:
        writer.close()
    return {"latencies": latencies, "sent": sent, "answered": answered, "cpu": cpu,
            "failures": failures, "pid": os.getpid()}


def main() -> None:
    """Answer each command on standard input with one JSON line."""
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(asyncio.run(_run(json.loads(line)))), flush=True)


if __name__ == "__main__":
    main()
