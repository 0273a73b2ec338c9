"""Intake from a RabbitMQ queue: one message at a time (prefetch 1), acknowledged only
after the intake committed (the ``rabbitmq`` extra: aio-pika)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..._extras import needs_extra
from ...client import Client
from ...errors import ConfigurationError
from ...retry import RetryPolicy
from ..intake import Routes
from ._handling import DEFAULT_BACKOFF, IntakeCounts, MessageHandler
from ._messages import DeadLetter

with needs_extra("rabbitmq", "RabbitMQIntake"):
    import aio_pika
    from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
    from aiormq.exceptions import AMQPConnectionError, ChannelNotFoundEntity

log = logging.getLogger("underway.intake")

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
"""Where :class:`RabbitMQIntake` connects by default."""
KEY_HEADER = "Idempotency-Key"
"""The header read for the idempotency key when a message has no ``message_id``."""


def _text(value: Any) -> str:
    """An AMQP header value as text."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    return str(value)


@dataclass
class _AmqpDelivery:
    """One AMQP message, settled on the channel it came on."""

    msg: AbstractIncomingMessage
    channel: AbstractChannel
    dead_queue: str | None
    body: bytes
    message_id: str | None
    headers: dict[str, str]
    received_at: datetime | None

    async def ack(self) -> None:
        await self.msg.ack()

    async def dead_letter(self, letter: DeadLetter) -> None:
        if self.dead_queue is None:
            # The queue's own dead-letter exchange, if it has one, takes it from here.
            await self.msg.reject(requeue=False)
            return
        await self.channel.default_exchange.publish(
            aio_pika.Message(
                letter.encode(), headers=dict(letter.header_fields()),
                message_id=self.msg.message_id, content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=self.dead_queue, mandatory=True)
        await self.msg.ack()

    async def retry(self, delay: float) -> None:
        await self.msg.nack(requeue=True)


def _delivery(msg: AbstractIncomingMessage, channel: AbstractChannel, dead_queue: str | None,
              key_header: str) -> _AmqpDelivery:
    headers = {str(k): _text(v) for k, v in (msg.headers or {}).items()}
    lower = {k.lower(): v for k, v in headers.items()}
    key = msg.message_id or lower.get(key_header.lower()) or None
    stamp = msg.timestamp
    if stamp is not None and stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return _AmqpDelivery(msg, channel, dead_queue, msg.body, key, headers, stamp)


class RabbitMQIntake:
    """Consume RabbitMQ queue ``queue`` into intake.

    Each message is acted on through :func:`~underway.scheduling.intake.intake` and
    acknowledged after the intake committed. One is in flight (prefetch 1), so messages are
    acted on in queue order. The idempotency key is the body's ``idempotency_key``, else the
    AMQP ``message_id`` property, else the ``key_header`` header. A message with none is
    malformed: it could not be made to act once.

    A malformed message is not JSON, not an event, has no key or no route, or is refused by
    its route. It is published to queue ``dead_letter``, confirmed by the broker, and then
    acknowledged. The reason is in the ``Underway-Dead-Letter-Reason`` header and in the JSON
    body. Without ``dead_letter`` it is rejected without requeue, so the queue's own
    dead-letter exchange, if any, takes it. When the store fails, the message is requeued
    and the consumer pauses. See docs/intake.md.

    Args:
        client: The client runs are started and signalled through.
        routes: The routes, by event kind.
        queue: The queue consumed.
        url: The broker's AMQP URL.
        dead_letter: The queue for malformed messages; declared durable when missing.
        key_header: The header that may carry the idempotency key.
        tenant_id: The tenant events are for.
        source: The events' source; by default ``rabbitmq:{queue}``.
        backoff: How long the consumer pauses when the store fails.
    """

    def __init__(
        self, client: Client, routes: Routes, *, queue: str, url: str = DEFAULT_URL,
        dead_letter: str | None = None, key_header: str = KEY_HEADER,
        tenant_id: str = "default", source: str | None = None,
        backoff: RetryPolicy = DEFAULT_BACKOFF,
    ) -> None:
        if not queue:
            raise ConfigurationError("RabbitMQIntake needs a non-empty queue")
        if dead_letter == queue:
            raise ConfigurationError(
                f"the dead-letter queue is the queue read ({queue!r}): a dead letter would "
                "be read again")
        self.queue, self.url, self.dead_letter, self.key_header = (
            queue, url, dead_letter, key_header)
        self.handler = MessageHandler(client, routes if isinstance(routes, Routes)
                                      else Routes(routes), tenant_id,
                                      source or f"rabbitmq:{queue}", backoff)

    @property
    def counts(self) -> IntakeCounts:
        """What this consumer has done so far."""
        return self.handler.counts

    async def run(self, stop: asyncio.Event | None = None, *,
                  ready: asyncio.Event | None = None) -> IntakeCounts:
        """Consume until ``stop`` is set (a message being acted on is finished first,
        one received and not yet started is requeued), then close the connection;
        ``ready`` is set once the consumer is subscribed. Raises
        :class:`~underway.errors.ConfigurationError` when the broker or the queue is
        missing."""
        stop = stop or asyncio.Event()
        try:
            connection = await aio_pika.connect_robust(self.url, timeout=10)
        except (AMQPConnectionError, OSError) as exc:
            raise ConfigurationError(
                f"cannot connect to RabbitMQ at {_safe(self.url)}: {exc}") from None
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            await channel.set_qos(prefetch_count=1)
            queue = await self._queues(connection, channel)
            await self._consume(channel, queue, stop, ready)
        finally:
            await connection.close()
        return self.counts

    async def _queues(self, connection: aio_pika.abc.AbstractRobustConnection,
                      channel: AbstractChannel) -> AbstractQueue:
        """The queue read (it must exist); the dead-letter queue, declared when missing."""
        for name, must_exist in ((self.queue, True), (self.dead_letter, False)):
            if name is None:
                continue
            # A passive declare of a missing queue closes its channel: use a spare one.
            probe = await connection.channel()
            try:
                await probe.get_queue(name, ensure=True)
            except ChannelNotFoundEntity:
                if must_exist:
                    raise ConfigurationError(f"RabbitMQ has no queue {name!r}") from None
                await channel.declare_queue(name, durable=True)
            finally:
                if not probe.is_closed:
                    await probe.close()
        return await channel.get_queue(self.queue, ensure=False)

    async def _consume(self, channel: AbstractChannel, queue: AbstractQueue,
                       stop: asyncio.Event, ready: asyncio.Event | None) -> None:
        inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        tag = await queue.consume(inbox.put)
        if ready is not None:
            ready.set()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                got = asyncio.ensure_future(inbox.get())
                await asyncio.wait({got, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    break
                msg = got.result()
                await self.handler.handle(
                    _delivery(msg, channel, self.dead_letter, self.key_header), stop)
        finally:
            stopping.cancel()
            await queue.cancel(tag)
            while not inbox.empty():
                # Received and never started: back to the queue, in its place (a closed
                # channel puts it back by itself).
                with contextlib.suppress(Exception):
                    await inbox.get_nowait().nack(requeue=True)


def _safe(url: str) -> str:
    """``url`` without its password."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, _, cred = head.partition("://")
    return f"{scheme}://{cred.partition(':')[0]}@{tail}"
