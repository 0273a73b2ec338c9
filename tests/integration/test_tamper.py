"""`underway audit verify` catches every way of tampering with a stored journal.

Real runs are written through the engine on SQLite and on PostgreSQL; then the events
table is edited behind the engine's back with plain SQL, and the real CLI must exit 1
naming the tenant, the run and the first bad sequence number.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from underway import CallInfo, Engine, Flow, ManualClock, RunContext, Runner, connect, tool
from underway.cli import app
from underway.flow import Next
from underway.store.postgres import split_url

# -- a small flow whose journal has read-only and mutating calls, a timer and a result ----


class Order(BaseModel):
    amount: int = 1
    note: str = ""
    items: list[str] = []


class Totals(BaseModel):
    total: int = 0


probe: Flow[Totals, Order] = Flow("tamper_probe", state=Totals, input=Order)


@tool(mutating=False)
def price(args: Any, info: CallInfo) -> Any:
    return {"tenant": info.tenant_id, "unit": 7}


@tool
def charge(args: Any, info: CallInfo) -> Any:
    return {"charged": args["amount"], "key": info.key}


@probe.step(start=True)
async def quote(ctx: RunContext[Totals, Order]) -> Next:
    unit = await ctx.call(price, {"amount": ctx.input.amount, "note": ctx.input.note})
    ctx.state.total = unit["unit"] * ctx.input.amount
    return ctx.goto(pay)


@probe.step
async def pay(ctx: RunContext[Totals, Order]) -> Next:
    await ctx.call(charge, {"amount": ctx.state.total})
    return ctx.sleep(30, then=finish)


@probe.step
async def finish(ctx: RunContext[Totals, Order]) -> Next:
    return ctx.done({"total": ctx.state.total})


EVENTS_PER_RUN = 13
# (tenant, run, input): "r-1" exists in two tenants with the same input and clock, so
# their journals differ only where the tenant shows (the price result) and in the chain.
RUNS = [
    ("acme", "r-1", {"amount": 2}),
    ("acme", "r-2", {"amount": 3}),
    ("globex", "r-1", {"amount": 2}),
    # A large note is stored as a content-addressed blob outside the event, a long list as
    # a chain of blobs, one per item.
    ("globex", "r-big", {"amount": 1, "note": "n" * 5000,
                         "items": [f"item-{i:03}" for i in range(200)]}),
]


def populate(url: str) -> None:
    """Drive every run in RUNS to completion through the engine."""
    store = connect(url)
    try:
        clock = ManualClock(1_700_000_000.0)
        engine = Engine(store, flows=[probe], tools=[price, charge], clock=clock)
        for tenant, run_id, order in RUNS:
            engine.start(probe, order, tenant_id=tenant, run_id=run_id)
        for tenant, run_id, _ in RUNS:
            state = asyncio.run(Runner(engine).run_until_complete(run_id, tenant_id=tenant))
            assert state.status == "completed"
            assert state.seq == EVENTS_PER_RUN
    finally:
        store.close()


# -- raw SQL access to each backend ----------------------------------------------------


class Raw:
    """Plain SQL on the database behind the store (``?`` placeholders on both)."""

    def __init__(self, execute: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]) -> None:
        self._execute = execute

    def q(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self._execute(sql, params)

    def event(self, tenant: str, run: str, seq: int) -> tuple[str, bytes, str]:
        rows = self.q(
            "SELECT type, payload, hash FROM events WHERE tenant_id = ? AND run_id = ? AND seq = ?",
            tenant, run, seq,
        )
        assert rows, f"no event {tenant}/{run}/{seq}"
        kind, payload, digest = rows[0]
        return str(kind), bytes(payload), bytes(digest).hex()

    def put(self, tenant: str, run: str, seq: int, row: tuple[str, bytes, str]) -> None:
        self.q(
            "UPDATE events SET type = ?, payload = ?, hash = ? "
            "WHERE tenant_id = ? AND run_id = ? AND seq = ?",
            row[0], row[1], bytes.fromhex(row[2]), tenant, run, seq,
        )

    def insert(self, tenant: str, run: str, seq: int, row: tuple[str, bytes, str]) -> None:
        self.q(
            "INSERT INTO events (tenant_id, run_id, seq, type, payload, hash) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            tenant, run, seq, row[0], row[1], bytes.fromhex(row[2]),
        )

    def delete(self, tenant: str, run: str, seq: int) -> None:
        self.q("DELETE FROM events WHERE tenant_id = ? AND run_id = ? AND seq = ?",
               tenant, run, seq)


@contextmanager
def sqlite_raw(url: str) -> Iterator[Raw]:
    conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)

    def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    try:
        yield Raw(execute)
    finally:
        conn.close()


@contextmanager
def postgres_raw(url: str) -> Iterator[Raw]:
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        if schema:
            conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(
                psycopg.sql.Identifier(schema)))

        def execute(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            cur = conn.execute(sql.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

        yield Raw(execute)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, Callable[[], Any]]:
    """(URL, raw SQL opener) of a freshly populated database of each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/tamper.db"
        opener: Callable[[str], AbstractContextManager[Raw]] = sqlite_raw
    else:
        url = request.getfixturevalue("pg_url")
        opener = postgres_raw
    populate(url)
    return url, lambda: opener(url)


def verify(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["audit", "verify", "--db", url, *args])
    return result.exit_code, result.stdout + result.stderr


# -- tampering -------------------------------------------------------------------------


def flip_bit(raw: Raw) -> tuple[str, str, int]:
    kind, payload, digest = raw.event("acme", "r-1", 7)
    i = payload.index(b'"charged"') + 2
    flipped = payload[:i] + bytes([payload[i] ^ 0x01]) + payload[i + 1:]
    raw.put("acme", "r-1", 7, (kind, flipped, digest))
    return "acme", "r-1", 7


def edit_and_rehash(raw: Raw) -> tuple[str, str, int]:
    """An editor who recomputes the edited event's own hash is caught at the next one."""
    from underway.events import link_hash

    _, _, prev = raw.event("acme", "r-1", 6)
    kind, payload, _ = raw.event("acme", "r-1", 7)
    edited = payload.replace(b'"charged":14', b'"charged":99')
    assert edited != payload
    raw.put("acme", "r-1", 7, (kind, edited, link_hash(prev, 7, kind, edited)))
    return "acme", "r-1", 8


def delete_middle(raw: Raw) -> tuple[str, str, int]:
    raw.delete("acme", "r-2", 5)
    return "acme", "r-2", 5


def delete_last(raw: Raw) -> tuple[str, str, int]:
    raw.delete("globex", "r-1", EVENTS_PER_RUN)
    return "globex", "r-1", EVENTS_PER_RUN


def swap(raw: Raw) -> tuple[str, str, int]:
    sixth, seventh = raw.event("acme", "r-2", 6), raw.event("acme", "r-2", 7)
    raw.put("acme", "r-2", 6, seventh)
    raw.put("acme", "r-2", 7, sixth)
    return "acme", "r-2", 6


def splice_from_other_run(raw: Raw) -> tuple[str, str, int]:
    raw.put("acme", "r-1", 7, raw.event("acme", "r-2", 7))
    return "acme", "r-1", 7


def append_from_other_run(raw: Raw) -> tuple[str, str, int]:
    """An event of another run appended after the last one, run row updated to match."""
    kind, payload, digest = raw.event("acme", "r-2", EVENTS_PER_RUN)
    raw.insert("acme", "r-1", EVENTS_PER_RUN + 1, (kind, payload, digest))
    raw.q("UPDATE runs SET last_seq = ?, last_hash = ? WHERE tenant_id = ? AND run_id = ?",
          EVENTS_PER_RUN + 1, digest, "acme", "r-1")
    return "acme", "r-1", EVENTS_PER_RUN + 1


def append_without_row(raw: Raw) -> tuple[str, str, int]:
    """An extra event the run row does not know about."""
    raw.insert("acme", "r-1", EVENTS_PER_RUN + 1, raw.event("acme", "r-2", EVENTS_PER_RUN))
    return "acme", "r-1", EVENTS_PER_RUN + 1


def splice_from_other_tenant(raw: Raw) -> tuple[str, str, int]:
    """The same run id, seq and flow in another tenant: only the chain tells them apart."""
    raw.put("globex", "r-1", 3, raw.event("acme", "r-1", 3))
    return "globex", "r-1", 3


def edit_blob(raw: Raw) -> tuple[str, str, int]:
    """A large value lives in a content-addressed blob; editing it is an edit too."""
    (key, data), = raw.q(
        "SELECT key, data FROM blobs WHERE tenant_id = ? ORDER BY length(data) DESC LIMIT 1",
        "globex",
    )
    edited = bytes(data).replace(b"nnnn", b"nxnn", 1)
    raw.q("UPDATE blobs SET data = ? WHERE tenant_id = ? AND key = ?", edited, "globex", key)
    return "globex", "r-big", 1


def edit_chain_node(raw: Raw) -> tuple[str, str, int]:
    """One item in the middle of a long list, stored as a node of a blob chain."""
    (key, data), = [
        (k, bytes(d)) for k, d in raw.q("SELECT key, data FROM blobs WHERE tenant_id = ?",
                                         "globex")
        if b'"x":"item-100"' in bytes(d)
    ]
    edited = data.replace(b"item-100", b"item-999")
    raw.q("UPDATE blobs SET data = ? WHERE tenant_id = ? AND key = ?", edited, "globex", key)
    return "globex", "r-big", 1


def delete_run_row(raw: Raw) -> tuple[str, str, int]:
    """The run's row is gone; its journal is still there and must still be audited."""
    raw.q("DELETE FROM runs WHERE tenant_id = ? AND run_id = ?", "acme", "r-2")
    return "acme", "r-2", 1


TAMPERINGS = [
    delete_run_row,
    flip_bit, edit_and_rehash, delete_middle, delete_last, swap, splice_from_other_run,
    append_from_other_run, append_without_row, splice_from_other_tenant, edit_blob,
    edit_chain_node,
]


def test_untouched_database_verifies(db: tuple[str, Callable[[], Any]]) -> None:
    url, _ = db
    code, output = verify(url, "--all")
    assert code == 0, output
    assert f"verified {len(RUNS)} runs, {len(RUNS) * EVENTS_PER_RUN} events in 2 tenants" in output
    code, output = verify(url, "--tenant", "acme", "r-2")
    assert code == 0, output
    assert "verified 1 run" in output


@pytest.mark.parametrize("tamper", TAMPERINGS, ids=lambda f: f.__name__)
def test_tampering_is_detected(
    db: tuple[str, Callable[[], Any]], tamper: Callable[[Raw], tuple[str, str, int]]
) -> None:
    url, raw = db
    with raw() as conn:
        tenant, run, seq = tamper(conn)

    code, output = verify(url, "--all")
    assert code == 1, output
    assert f"TAMPERED run {run} in tenant {tenant!r} at seq {seq}:" in output
    assert f"1 of {len(RUNS)} runs failed verification" in output

    # Verifying the run alone, or its tenant alone, names it too; other tenants stay clean.
    code, output = verify(url, "--tenant", tenant, run)
    assert code == 1, output
    assert f"TAMPERED run {run} in tenant {tenant!r} at seq {seq}:" in output
    other = "globex" if tenant == "acme" else "acme"
    code, output = verify(url, "--tenant", other)
    assert code == 0, output
