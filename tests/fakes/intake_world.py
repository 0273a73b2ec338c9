"""What the queue and mail intake tests share: the routes they take events in with, the
real brokers reached from synchronous test code (a fresh stream or queue per test,
removed afterwards), ``underway intake`` processes, and the checks of what a store holds
after a batch — each key acted on once, one run per entity, each change signalled once.

The routes start runs of flows by name (``order``, ``desk``): no worker runs them, so the
runs stay unfinished, own their entities, and keep every signal in their inbox, where the
tests count them.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika
import nats
import psycopg
import pytest
from pydantic import BaseModel

from underway import Flow, Next, RunContext, connect
from underway.retry import RetryPolicy
from underway.scheduling.intake import Routes, Signal, StartFlow
from underway.store._urls import split_url
from underway.store.base import Store

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""How long a test waits for something that should take a second: a guard against hangs,
never reached on a busy machine."""
TENANT = "shop"

routes = Routes({
    "order.placed": StartFlow("order", signal="order.changed"),
    "order.changed": Signal("order.changed"),
    # A run of this route takes its data subject from the payload: an event without one is
    # refused by the route (an IntakeError), not by the body's schema.
    "order.for_customer": StartFlow("order", subject_from="payload.customer"),
    "mail.received": StartFlow("desk", signal="mail.received"),
})
"""The routes every intake test uses (``--routes fakes.intake_world:routes``)."""


class OrderInput(BaseModel):
    """What an order's run takes: its payload, when it fits."""

    quantity: int = 1


class MailInput(BaseModel):
    """What a desk run takes: a mail's payload never has a priority, so none fits."""

    priority: int


_order: Flow[OrderInput, OrderInput] = Flow("order", input=OrderInput, state=OrderInput)
_desk: Flow[MailInput, MailInput] = Flow("desk", input=MailInput, state=MailInput)


@_order.step(start=True)
async def _take(ctx: RunContext[OrderInput, OrderInput]) -> Next:
    return ctx.done()


@_desk.step(start=True)
async def _read(ctx: RunContext[MailInput, MailInput]) -> Next:
    return ctx.done()


flows = [_order, _desk]
"""The code of the flows the routes start by name, for the tests that give it
(``--app fakes.intake_world:flows``): with it, input is checked at the door."""


def order(entity: str, kind: str, **payload: Any) -> dict[str, Any]:
    """The body of an ``order.placed`` or ``order.changed`` message."""
    return {"entity_id": entity, "event_type": f"order.{kind}", "payload": payload}


QUICK = RetryPolicy(initial_interval=0.05, backoff=2.0, max_interval=0.2)
"""A short backoff: a test's store failure is over as soon as the test lifts it."""


MALFORMED: list[tuple[str, bytes | dict[str, Any], str]] = [
    ("bad-json", b'{"entity_id": "o1", ', "the body is not JSON"),
    ("no-route", {"entity_id": "o2", "event_type": "order.unknown"},
     "no route for event type 'order.unknown'"),
    ("invalid", {"entity_id": "", "event_type": "order.placed"},
     "invalid event: body.entity_id"),
    ("unknown-field", {**order("o3", "placed"), "colour": "red"}, "body.colour"),
    ("refused", {"entity_id": "o4", "event_type": "order.for_customer", "payload": {}},
     "takes the run's subject from 'payload.customer'"),
    ("no-owner", order("o5", "changed", quantity=1), "no unfinished run owns entity 'o5'"),
    ("other-tenant", {**order("o6", "placed"), "tenant_id": "elsewhere"},
     "names tenant 'elsewhere'"),
]
"""(message id, body, what the reason says) of each kind of malformed message."""


def block_intake(url: str) -> None:
    """Make every intake commit fail in the database at ``url``, as a store outage would."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("CREATE TRIGGER outage BEFORE INSERT ON intake "
                       "BEGIN SELECT RAISE(ABORT, 'the store is down'); END")
        return
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'CREATE FUNCTION "{schema}".outage() RETURNS trigger LANGUAGE plpgsql '
                   "AS $$ BEGIN RAISE EXCEPTION 'the store is down'; END $$")
        db.execute(f'CREATE TRIGGER outage BEFORE INSERT ON "{schema}".intake '
                   f'FOR EACH ROW EXECUTE FUNCTION "{schema}".outage()')


def unblock_intake(url: str) -> None:
    """Lift :func:`block_intake`."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            db.execute("DROP TRIGGER outage")
        return
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'DROP TRIGGER outage ON "{schema}".intake')


def wait_until(done: Callable[[], bool], what: str, timeout: float = PATIENCE_S) -> None:
    """Poll ``done`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


@dataclass(frozen=True)
class Sent:
    """One message of a batch: its key, entity and kind (``placed`` or ``changed``)."""

    key: str
    entity: str
    kind: str


def batch(entities: int) -> list[tuple[str, dict[str, Any]]]:
    """(message id, body) of ``entities`` orders, each placed then changed twice: the
    placement must start a run before its changes can be signalled to it."""
    out = []
    for e in range(entities):
        ent = f"ord-{e}"
        out.append((f"{ent}-placed", order(ent, "placed", sku=f"A-{e}")))
        out += [(f"{ent}-changed-{c}", order(ent, "changed", quantity=c)) for c in (1, 2)]
    return out


def check_once(store: Store, sent: Iterable[Sent]) -> None:
    """Every key was acted on once; each entity has one run, started by its placement;
    that run's inbox holds exactly its changes, each once."""
    sent = list(sent)
    owners: dict[str, str] = {}
    for s in sent:
        record = store.get_intake(TENANT, s.key)
        assert record is not None, f"key {s.key!r} was never acted on"
        assert record.entity_id == s.entity
        if s.kind == "placed":
            assert record.action == "started", record
            owners[s.entity] = record.run_id
    runs = store.list_runs(TENANT, limit=1000)
    assert sorted(r.run_id for r in runs) == sorted(owners.values()), \
        "a run was started more than once per entity"
    for entity, run_id in owners.items():
        changes = sorted(s.key for s in sent if s.entity == entity and s.kind == "changed")
        inbox = sorted(sig.signal_id for sig in store.pending_signals(TENANT, run_id))
        assert inbox == changes, f"{entity}: signals {inbox}, expected {changes}"


def rows_digest(url: str) -> dict[str, str]:
    """A digest of every table's rows in the database at ``url``, by table: equal before
    and after something means it stored nothing."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            tables = [r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: repr(sorted(map(repr, db.execute(f'SELECT * FROM "{t}"'))))
                    for t in tables}
    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        tables = [r[0] for r in db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,))]
        return {t: str(db.execute(
            "SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r::text), '')) "
            f'FROM "{schema}"."{t}" r').fetchone()) for t in tables}


def open_store(url: str) -> Store:
    """The store at ``url``, its schema created."""
    return connect(url, migrate=True)


@contextmanager
def stored(url: str) -> Iterator[Store]:
    """The store at ``url`` (its schema created), closed afterwards."""
    store = open_store(url)
    try:
        yield store
    finally:
        store.close()


# -- NATS JetStream ----------------------------------------------------------------------
@dataclass
class NatsStream:
    """A fresh stream (subjects ``<name>.in``) and a dead-letter stream
    (``<name>.dead``) on the real server, reached from synchronous code."""

    url: str
    name: str = field(default_factory=lambda: f"T{uuid.uuid4().hex[:12]}")

    @property
    def subject(self) -> str:
        return f"{self.name}.in"

    @property
    def dead(self) -> str:
        return f"{self.name}.dead"

    def _run(self, work: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            nc = await nats.connect(self.url, connect_timeout=10)
            try:
                return await work(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(main())

    def create(self) -> None:
        async def work(js: Any) -> None:
            await js.add_stream(name=self.name, subjects=[self.subject])
            await js.add_stream(name=f"{self.name}DL", subjects=[self.dead])

        self._run(work)

    def delete(self) -> None:
        async def work(js: Any) -> None:
            for name in (self.name, f"{self.name}DL"):
                with suppress(nats.js.errors.NotFoundError):
                    await js.delete_stream(name)

        self._run(work)

    def publish(self, messages: list[tuple[str | None, bytes | dict[str, Any]]]) -> list[int]:
        """Publish (Nats-Msg-Id or None, body) pairs; their stream sequences."""

        async def work(js: Any) -> list[int]:
            seqs = []
            for msg_id, body in messages:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                headers = {"Nats-Msg-Id": msg_id} if msg_id else None
                seqs.append((await js.publish(self.subject, raw, headers=headers)).seq)
            return seqs

        return list(self._run(work))

    def dead_letters(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """(headers, JSON body) of every dead letter, in order."""

        async def work(js: Any) -> list[tuple[dict[str, str], dict[str, Any]]]:
            info = await js.stream_info(f"{self.name}DL")
            out = []
            for seq in range(1, info.state.last_seq + 1):
                msg = await js.get_msg(f"{self.name}DL", seq)
                out.append((dict(msg.headers or {}), json.loads(msg.data)))
            return out

        return list(self._run(work))

    def settled(self, durable: str = "underway-intake") -> bool:
        """Whether the consumer has acknowledged every message of the stream."""

        async def work(js: Any) -> bool:
            try:
                info = await js.consumer_info(self.name, durable)
            except nats.js.errors.NotFoundError:
                return False
            return bool(info.num_pending == 0 and info.num_ack_pending == 0)

        return bool(self._run(work))


# -- RabbitMQ ------------------------------------------------------------------------------
@dataclass
class RabbitQueue:
    """A fresh durable queue ``<name>`` and its dead-letter queue ``<name>.dead`` on the
    real broker, reached from synchronous code."""

    url: str
    name: str = field(default_factory=lambda: f"q-{uuid.uuid4().hex[:12]}")

    @property
    def dead(self) -> str:
        return f"{self.name}.dead"

    def _run(self, work: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            conn = await aio_pika.connect(self.url, timeout=30)
            try:
                return await work(await conn.channel())
            finally:
                await conn.close()

        return asyncio.run(main())

    def create(self) -> None:
        async def work(ch: Any) -> None:
            await ch.declare_queue(self.name, durable=True)

        self._run(work)

    def delete(self) -> None:
        async def work(ch: Any) -> None:
            for name in (self.name, self.dead):
                await ch.queue_delete(name)

        self._run(work)

    def publish(self, messages: list[tuple[str | None, bytes | dict[str, Any]]],
                headers: dict[str, str] | None = None) -> None:
        """Publish (message_id, body) pairs (confirmed by the broker)."""

        async def work(ch: Any) -> None:
            for msg_id, body in messages:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                await ch.default_exchange.publish(
                    aio_pika.Message(raw, message_id=msg_id, headers=headers or {},
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=self.name)

        self._run(work)

    def ready(self, name: str | None = None) -> int:
        """Messages waiting in the queue (not delivered to a consumer)."""

        async def work(ch: Any) -> int:
            q = await ch.declare_queue(name or self.name, passive=True)
            return int(q.declaration_result.message_count)

        return int(self._run(work))

    def dead_letters(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """(headers, JSON body) of every dead letter, in order (taken off the queue)."""

        async def work(ch: Any) -> list[tuple[dict[str, str], dict[str, Any]]]:
            q = await ch.declare_queue(self.dead, durable=True)
            out = []
            while (msg := await q.get(fail=False)) is not None:
                out.append(({k: str(v) for k, v in (msg.headers or {}).items()},
                            json.loads(msg.body)))
                await msg.ack()
            return out

        return list(self._run(work))


# -- underway intake processes ----------------------------------------------------------------
class IntakeProcess:
    """An ``underway intake ...`` process run from ``tests/`` (so ``--routes
    fakes.intake_world:routes`` resolves); its output is read as it comes."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
        self.proc = subprocess.Popen(
            [str(UNDERWAY), "intake", *args, "--routes", "fakes.intake_world:routes",
             "--tenant", TENANT, "--verbose"],
            cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**base, **(env or {})})
        self.out: list[str] = []
        self.err: queue.Queue[str] = queue.Queue()
        self.err_seen: list[str] = []
        self._readers = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.out.extend(line.rstrip("\n") for line in self.proc.stdout)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.put(line.rstrip("\n"))

    def expect_err(self, word: str, timeout: float = PATIENCE_S) -> str:
        """The next stderr line containing ``word``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.err.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                pytest.fail(f"`underway intake` printed no line with {word!r}; stderr:\n"
                            + "\n".join(self.err_seen[-40:]))
            self.err_seen.append(line)
            if word in line:
                return line

    def stderr(self) -> str:
        while not self.err.empty():
            self.err_seen.append(self.err.get_nowait())
        return "\n".join(self.err_seen[-60:])

    def wait(self, timeout: float = PATIENCE_S) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()
            pytest.fail(f"`underway intake` did not exit:\n{self.stderr()}")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> str:
        """Send ``sig`` (SIGTERM or SIGINT), wait for a clean exit; the summary line."""
        self.proc.send_signal(sig)
        code = self.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        assert code == 0, f"exit status {code}:\n{self.stderr()}"
        summary = [line for line in self.out if "stopped:" in line]
        assert summary, self.out
        return summary[-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


# -- a consumer in a thread of its own ------------------------------------------------------
class ConsumerThread:
    """A :class:`~underway.scheduling.intake_sources.NatsIntake` or ``RabbitMQIntake`` running in a
    thread with its own event loop, so synchronous test code can publish and check while
    it consumes. :meth:`close` stops it as SIGTERM would and re-raises what it raised."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        wait_until(lambda: self.ready.is_set() or self.error is not None,
                   "the consumer to subscribe")
        if self.error is not None:
            raise self.error

    def _main(self) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            ready = asyncio.Event()
            task = asyncio.ensure_future(self.consumer.run(self._stop, ready=ready))
            waiting = asyncio.ensure_future(ready.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            if ready.is_set():
                self.ready.set()
            await task

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc

    @property
    def counts(self) -> Any:
        return self.consumer.counts

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with suppress(RuntimeError):  # the loop has ended already
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=PATIENCE_S)
        assert not self._thread.is_alive(), "the consumer did not stop"
        if self.error is not None:
            raise self.error


# -- fixtures: the intake tests import them (pytest finds a fixture by its name) --------


@pytest.fixture
def nats_stream(nats_url: str) -> Iterator[NatsStream]:
    """A fresh JetStream stream and its dead-letter stream."""
    stream = NatsStream(nats_url)
    stream.create()
    yield stream
    stream.delete()


@pytest.fixture
def rabbit_queue(amqp_url: str) -> Iterator[RabbitQueue]:
    """A fresh RabbitMQ queue (and, once used, its dead-letter queue)."""
    q = RabbitQueue(amqp_url)
    q.create()
    yield q
    q.delete()
