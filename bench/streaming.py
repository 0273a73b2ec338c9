"""Time to the first streamed token: through a durable call against a direct SDK call to the
same local server, the baseline, measured in the same run.

A local server speaks OpenAI's Chat Completions wire format and streams twenty words, the
first at once, the others ``PACE`` seconds apart. The baseline asks it with the ``openai``
SDK directly (``stream=True``) and times the call until the first word arrives. The
durable figure times a step's ``ctx.model(..., stream=True)`` until a reader that follows
the run's live stream (``Client.stream``, on its own store connection) holds the first
word: the engine's stream bookkeeping, the write of the first batch, and the reader's
wake-up (a NOTIFY on PostgreSQL; a poll of at most ``POLL_S`` on SQLite).

Batching: a model that emits ``FAST`` deltas as fast as it can, through a durable call.
The engine writes a batch while the next gathers, so the deltas cost far fewer commits
than one each. The baseline writes the same deltas one commit each, in the same run.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, median, pg_schema, sqlite_dir
from underway.models import Message, ModelRequest, OpenAIChat, Price, PriceTable
from underway.store.streams import POLL_S

REPS = 15
WORDS = [f"word{i} " for i in range(20)]
FAST = 2000
"""Deltas the batching figure streams."""
PACE = 0.005
"""Seconds between two words after the first."""
TARGETS = {"sqlite": 40.0, "postgres": 12.0}
"""The most the first token through a durable call may take, as a ratio of the direct
call's. On SQLite the reader polls (``POLL_S``): its wait dominates."""


class _Server:
    """The local streaming server, in a thread."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # a provider sends each event at once

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for i, data in enumerate(_chunks()):
                    if i > 1:
                        time.sleep(PACE)
                    raw = f"data: {data}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        host, port = self.http.server_address[:2]
        self.base_url = f"http://{host!s}:{port}/v1"


def _chunks() -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps({"id": "b", "object": "chat.completion.chunk", "created": 0,
                           "model": "bench-1", "choices": [
                               {"index": 0, "delta": delta, "finish_reason": finish}]})

    return [chunk({"role": "assistant", "content": ""}),
            *[chunk({"content": w}) for w in WORDS], chunk({}, "stop"),
            json.dumps({"id": "b", "object": "chat.completion.chunk", "created": 0,
                        "model": "bench-1", "choices": [],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 20,
                                  "total_tokens": 25}}),
            "[DONE]"]


def _request() -> ModelRequest:
    return ModelRequest(messages=[Message.user("Say twenty words.")], max_tokens=64)


async def _direct(base_url: str) -> list[float]:
    """Seconds from the SDK call to its first word, per rep."""
    import openai

    client = openai.AsyncOpenAI(api_key="unused", base_url=base_url, max_retries=0)
    out = []
    try:
        for _ in range(REPS):
            began = time.perf_counter()
            chunks = await client.chat.completions.create(
                model="bench-1", messages=[{"role": "user", "content": "Say twenty words."}],
                max_tokens=64, stream=True, stream_options={"include_usage": True})
            first = None
            async for c in chunks:
                if first is None and c.choices and c.choices[0].delta.content:
                    first = time.perf_counter() - began
            assert first is not None
            out.append(first)
    finally:
        await client.close()
    return out


class _S(BaseModel):
    pass


async def _durable(url: str, base_url: str) -> list[float]:
    """Seconds from a step's streamed ``ctx.model`` to a reader holding the first word."""
    model = OpenAIChat("bench-1", api_key="unused", base_url=base_url,
                       prices=PriceTable({"bench-1": Price(input=0.0, output=0.0)}))
    asked: dict[str, float] = {}
    flow: uw.Flow[_S, Any] = uw.Flow("streamed", state=_S)

    @flow.step(start=True)
    async def ask(ctx: uw.RunContext[_S, Any]) -> Any:
        asked[ctx.run_id] = time.perf_counter()
        return ctx.done(await ctx.model(model, _request().to_json(), stream=True))

    store, reading = uw.connect(url), uw.connect(url)
    engine = uw.Engine(store, flows=[flow])
    reader = uw.Client(reading)
    out = []
    try:
        async with model:
            for _ in range(REPS):
                run_id = str(uuid.uuid4())
                seen: list[float] = []

                async def follow(run: str = run_id, got: list[float] = seen) -> None:
                    async for d in reader.stream(run):
                        if not got and isinstance(d.delta, dict) and d.delta["type"] == "text":
                            got.append(time.perf_counter())

                async def work(run: str = run_id) -> None:
                    # A reader follows from before the call, at a phase of its own.
                    await asyncio.sleep(random.uniform(0, POLL_S))
                    await uw.Runner(engine, poll=0.01).run_until_complete(run)

                engine.start(flow, run_id=run_id)
                await asyncio.gather(work(), follow())
                out.append(seen[0] - asked[run_id])
    finally:
        store.close()
        reading.close()
    return out


class _Fast:
    """Emits ``FAST`` deltas as fast as it can, each after a turn of the event loop (as
    each would come from its own read of the network), then answers."""

    name = "fast"

    async def complete(self, request: Any) -> Any:
        raise AssertionError("streamed")

    async def stream(self, request: Any, emit: Any) -> Any:
        for i in range(FAST):
            await asyncio.sleep(0)
            await emit({"type": "text", "text": f"t{i} "})
        return uw.ModelReply({"text": "fast"}, "fast-1", 1, FAST)


def _batching(url: str) -> tuple[float, float, float]:
    """(ms per delta batched, ms per delta one commit each, deltas per write)."""
    from underway.store.streams import NewDelta

    store = uw.connect(url)
    writes = [0]
    append = store.append_stream

    def counted(*args: Any) -> bool:
        writes[0] += 1
        return append(*args)

    store.append_stream = counted  # type: ignore[method-assign]
    flow: uw.Flow[_S, Any] = uw.Flow("fast", state=_S)

    @flow.step(start=True)
    async def ask(ctx: uw.RunContext[_S, Any]) -> Any:
        return ctx.done(await ctx.model(_Fast(), {"messages": []}, stream=True))

    engine = uw.Engine(store, flows=[flow])
    try:
        run_id, _ = engine.start(flow)
        began = time.perf_counter()
        asyncio.run(uw.Runner(engine, poll=0.01).run_until_complete(run_id))
        batched = (time.perf_counter() - began) / FAST
        deltas_per_write = (FAST + 1) / writes[0]
        other, _ = engine.start(flow)
        (held,) = store.claim(owner="bench", now=time.time(), ttl=60.0, run_id=other)
        began = time.perf_counter()
        for i in range(FAST):
            append("default", held.run_id, held.token, [NewDelta(
                "k", "ask", 0, 1, f'{{"type":"text","text":"t{i} "}}', time.time())])
        single = (time.perf_counter() - began) / FAST
    finally:
        store.close()
    return batched * 1e3, single * 1e3, deltas_per_write


def _figures(db: str, url: str) -> list[Figure]:
    server = _Server()
    try:
        base = median(asyncio.run(_direct(server.base_url))) * 1e3
        value = median(asyncio.run(_durable(url, server.base_url))) * 1e3
    finally:
        server.http.shutdown()
        server.http.server_close()
    ratio = value / base
    wake = "a NOTIFY wakes the reader" if db == "postgres" else \
        f"the reader polls every {POLL_S * 1e3:g} ms"
    batched, single, per_write = _batching(url)
    return [Figure(f"{db}.stream.first_token", value, "ms", base, ratio,
                   f"<= {TARGETS[db]}", ratio <= TARGETS[db],
                   note=f"durable streamed call to a reader's first word vs the SDK's first "
                        f"word from the same local server; median of {REPS}; {wake}"),
            Figure(f"{db}.stream.ms_per_delta", batched, "ms", single, batched / single,
                   "<= 0.5", batched / single <= 0.5,
                   note=f"{FAST} deltas as fast as a model can emit them, through a durable "
                        f"call (written in batches, {per_write:.0f} deltas a write) vs the "
                        "same deltas one commit each"),
            Figure(f"{db}.stream.deltas_per_write", per_write, "deltas",
                   note="how many deltas one write carried, on average")]


def bench_sqlite() -> list[Figure]:
    """The first streamed token through a durable call on SQLite."""
    with sqlite_dir() as d:
        return _figures("sqlite", f"sqlite:///{d}/stream.db")


def bench_postgres() -> list[Figure]:
    """The first streamed token through a durable call on PostgreSQL."""
    with pg_schema() as (_, url):
        return _figures("postgres", url)
