"""Bytes stored per model call for an agent whose context grows by one message a turn.

The agent keeps its conversation in its state and sends all of it to the model every turn
(``ctx.model(model, {"messages": history})``); the reply joins the history. The codec
stores each message once (blob chains shared between turns), so the database should grow
by about the same number of bytes every turn: the last 50 turns should cost what the first
50 did. The naive alternative — the whole history JSON-encoded into every turn's record —
grows quadratically; it is computed alongside for comparison.

"Database bytes" are the stored event payloads, blobs and checkpoints, summed in SQL.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic import BaseModel

import underway as uw
from common import Figure, pg_base_url, pg_schema, pg_store_missing, sqlite_dir
from underway.events import canonical_json
from underway.store import connect
from underway.testing import ScriptedModel

TENANT = "default"
TURNS = 200
MARKS = (50, 100, 150, 200)
_WORDS = ("invoice", "customer", "overdue", "payment", "reminder", "account", "balance",
          "schedule", "follow", "up", "the", "a", "of", "and", "to", "with", "please", "due")


def _message(rng: random.Random, role: str) -> dict[str, Any]:
    size = rng.randint(200, 500)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(_WORDS))
    return {"role": role, "content": " ".join(words)[:size]}


class Conversation(BaseModel):
    """The agent's state: its whole conversation so far."""

    history: list[dict[str, Any]] = []


def agent(model: ScriptedModel) -> uw.Flow[Conversation, Any]:
    """A flow that asks ``model`` once per turn with the whole history, ``TURNS`` times."""
    flow: uw.Flow[Conversation, Any] = uw.Flow("chat", state=Conversation)

    @flow.step
    async def turn(ctx: uw.RunContext[Conversation, Any]) -> Any:
        reply = await ctx.model(model, {"messages": ctx.state.history})
        ctx.state.history.append(reply)
        return ctx.goto(turn) if len(ctx.state.history) < TURNS else ctx.done()

    return flow


class Meter:
    """Measures the database bytes of a run before each model call (that is, after the
    turns before it committed)."""

    def __init__(self, measure: Any, responses: list[Any]) -> None:
        self.measure = measure
        self.after_turn: dict[int, int] = {}
        self.model = _MeteredModel(responses, self)


class _MeteredModel(ScriptedModel):
    def __init__(self, responses: list[Any], meter: Meter) -> None:
        super().__init__(responses, name="metered")
        self.meter = meter

    async def complete(self, request: Any) -> Any:
        self.meter.after_turn[len(self.requests)] = self.meter.measure()
        return await super().complete(request)


def _sqlite_bytes(path: str) -> Any:
    import sqlite3

    def measure() -> int:
        with sqlite3.connect(path) as c:
            row = c.execute(
                "SELECT (SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM events)"
                " + (SELECT COALESCE(SUM(LENGTH(data)), 0) FROM blobs)"
                " + (SELECT COALESCE(SUM(LENGTH(state)), 0) FROM checkpoints)"
            ).fetchone()
        c.close()
        return int(row[0])

    return measure


def _pg_bytes(schema: str) -> Any:
    import psycopg

    def measure() -> int:
        with psycopg.connect(pg_base_url()) as c:
            c.execute(f'SET search_path TO "{schema}"')
            row = c.execute(
                "SELECT (SELECT COALESCE(SUM(OCTET_LENGTH(payload)), 0) FROM events)"
                " + (SELECT COALESCE(SUM(OCTET_LENGTH(data)), 0) FROM blobs)"
                " + (SELECT COALESCE(SUM(OCTET_LENGTH(state)), 0) FROM checkpoints)"
            ).fetchone()
        return int(row[0]) if row else 0

    return measure


def _run(url: str, measure: Any) -> tuple[dict[int, int], dict[int, int]]:
    rng = random.Random(7)
    responses = [_message(rng, "assistant") for _ in range(TURNS)]
    meter = Meter(measure, responses)
    flow = agent(meter.model)
    store = connect(url)
    try:
        engine = uw.Engine(store, flows=[flow])
        state = asyncio.run(uw.run(engine, flow, tenant_id=TENANT))
        if state.status != "completed":
            raise RuntimeError(f"agent run ended {state.status}: {state.error}")
        meter.after_turn[TURNS] = measure()
    finally:
        store.close()
    naive, total = {0: 0}, 0
    for k in range(TURNS):
        total += len(canonical_json({"messages": responses[:k]}))
        total += len(canonical_json(responses[k]))
        naive[k + 1] = total
    return meter.after_turn, naive


def _figures(db: str, after: dict[int, int], naive: dict[int, int]) -> list[Figure]:
    out = [
        Figure(f"{db}.bytes_after_{k}_turns", float(after[k]), "bytes", float(naive[k]),
               after[k] / naive[k], note="baseline: every turn's request and reply "
               "JSON-encoded whole" if k == TURNS else "")
        for k in MARKS
    ]
    first = (after[50] - after[0]) / 50
    last = (after[200] - after[150]) / 50
    naive_first = naive[50] / 50
    naive_last = (naive[200] - naive[150]) / 50
    out.append(Figure(
        f"{db}.bytes_per_turn_last_50", last, "bytes/turn", first, last / first,
        "ratio ~ 1 (linear growth)", 0.8 <= last / first <= 1.25,
        note=f"baseline: bytes/turn over the first 50 turns; the naive encoding goes from "
        f"{naive_first:,.0f} to {naive_last:,.0f} bytes/turn ({naive_last / naive_first:.1f}x)",
    ))
    return out


def bench_sqlite() -> list[Figure]:
    """The growing-context agent on SQLite."""
    with sqlite_dir() as d:
        path = f"{d}/agent.db"
        after, naive = _run(f"sqlite:///{path}", _sqlite_bytes(path))
    return _figures("sqlite", after, naive)


def bench_postgres() -> list[Figure]:
    """The growing-context agent on PostgreSQL (skipped without a PostgreSQL store)."""
    if pg_store_missing():
        return []
    with pg_schema() as (schema, url):
        after, naive = _run(url, _pg_bytes(schema))
    return _figures("postgres", after, naive)
