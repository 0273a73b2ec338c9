"""Intake from a NATS JetStream stream: a durable pull consumer, one message at a time,
acknowledged only after the intake committed (the ``nats`` extra: nats-py)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from ..._extras import needs_extra
from ...client import Client
from ...errors import ConfigurationError
from ...retry import RetryPolicy
from ..intake import Routes
from ._handling import DEFAULT_BACKOFF, IntakeCounts, MessageHandler, pause
from ._messages import DeadLetter

with needs_extra("nats", "NatsIntake"):
    import nats
    from nats.aio.client import Client as NatsClient
    from nats.aio.msg import Msg
    from nats.errors import ConnectionClosedError, NoServersError
    from nats.errors import TimeoutError as NatsTimeout
    from nats.js import JetStreamContext
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import NotFoundError

log = logging.getLogger("underway.intake")

DEFAULT_SERVER = "nats://127.0.0.1:4222"
"""Where :class:`NatsIntake` connects by default."""
MSG_ID_HEADER = "Nats-Msg-Id"
"""The header JetStream deduplicates published messages on; intake's key when the body
names none."""
_RECONNECT_WAIT = 1.0
"""Seconds between attempts to reach the server."""
_FETCH_WAIT = 5.0
"""Seconds one pull waits for a message (a stop interrupts it at once)."""


@dataclass
class _NatsDelivery:
    """One JetStream message, settled through its reply subject."""

    msg: Msg
    js: JetStreamContext
    stream: str
    dead_subject: str | None
    body: bytes
    message_id: str | None
    headers: dict[str, str]
    received_at: datetime | None

    async def ack(self) -> None:
        await self.msg.ack_sync()

    async def dead_letter(self, letter: DeadLetter) -> None:
        if self.dead_subject is None:
            # Without a dead-letter subject the message is terminated: never delivered again.
            await self.msg.term()
            return
        # Headers JetStream acts on (an expected sequence, a TTL) stay in the letter's body;
        # the letter's own id makes a second write after a crash a duplicate JetStream drops.
        headers = {k: v for k, v in letter.header_fields().items()
                   if not k.lower().startswith("nats-")}
        headers[MSG_ID_HEADER] = f"dead:{self.stream}:{self.msg.metadata.sequence.stream}"
        await self.js.publish(self.dead_subject, letter.encode(), headers=headers)
        await self.msg.ack_sync()

    async def retry(self, delay: float) -> None:
        await self.msg.nak(delay=delay)


def _delivery(msg: Msg, js: JetStreamContext, stream: str,
              dead_subject: str | None) -> _NatsDelivery:
    headers = dict(msg.headers or {})
    meta = msg.metadata
    key = headers.get(MSG_ID_HEADER) or f"nats:{stream}:{meta.sequence.stream}"
    stamp = meta.timestamp
    if stamp is not None and stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return _NatsDelivery(msg, js, stream, dead_subject, msg.data, key, headers, stamp)


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether NATS ``subject`` falls under ``pattern`` (``*`` one token, ``>`` the rest)."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


class NatsIntake:
    """Consume ``subject`` of JetStream stream ``stream`` into intake.

    A durable pull consumer reads each message. It is created when missing, with explicit
    acks and one message in flight. So messages are acted on in stream order, even after a
    redelivery. Each message is acted on through :func:`~underway.scheduling.intake.intake`
    and acknowledged after the intake committed. The idempotency key is the body's
    ``idempotency_key``, else the ``Nats-Msg-Id`` header, else
    ``nats:{stream}:{stream sequence}``.

    A malformed message is not JSON, not an event, has no route, or is refused by its route.
    It is published to ``dead_letter`` and then acknowledged. The reason is in the
    ``Underway-Dead-Letter-Reason`` header and in the JSON body. Without ``dead_letter`` it
    is terminated (never delivered again) and logged. When the store fails, the message is
    handed back (a NAK with a delay) and the consumer pauses. See docs/intake.md.

    Args:
        client: The client runs are started and signalled through.
        routes: The routes, by event kind.
        stream: The JetStream stream.
        subject: The subject consumed.
        servers: The NATS servers.
        durable: The durable consumer's name.
        dead_letter: A subject a stream captures, for malformed messages.
        tenant_id: The tenant events are for.
        source: The events' source; by default ``nats:{stream}``.
        ack_wait: Seconds before an unacknowledged message is delivered again.
        backoff: How long the consumer pauses when the store fails.
    """

    def __init__(
        self, client: Client, routes: Routes, *, stream: str, subject: str,
        servers: str | list[str] = DEFAULT_SERVER, durable: str = "underway-intake",
        dead_letter: str | None = None, tenant_id: str = "default", source: str | None = None,
        ack_wait: float = 30.0, backoff: RetryPolicy = DEFAULT_BACKOFF,
    ) -> None:
        for name, value in (("stream", stream), ("subject", subject), ("durable", durable)):
            if not value:
                raise ConfigurationError(f"NatsIntake needs a non-empty {name}")
        if dead_letter is not None and subject_matches(subject, dead_letter):
            raise ConfigurationError(
                f"the dead-letter subject {dead_letter!r} is one the consumer reads "
                f"({subject!r}): a dead letter would be read again")
        if not ack_wait > 0:
            raise ConfigurationError(f"ack_wait must be positive, not {ack_wait}")
        self.stream, self.subject, self.durable = stream, subject, durable
        self.servers = servers
        self.dead_letter = dead_letter
        self.ack_wait = ack_wait
        self.handler = MessageHandler(client, routes if isinstance(routes, Routes)
                                      else Routes(routes), tenant_id,
                                      source or f"nats:{stream}", backoff)

    @property
    def counts(self) -> IntakeCounts:
        """What this consumer has done so far."""
        return self.handler.counts

    async def run(self, stop: asyncio.Event | None = None, *,
                  ready: asyncio.Event | None = None) -> IntakeCounts:
        """Consume until ``stop`` is set (a message being acted on is finished first),
        then close the connection; ``ready`` is set once the consumer is subscribed.
        Raises :class:`~underway.errors.ConfigurationError` when the server, the stream
        or the dead-letter subject's stream is missing."""
        stop = stop or asyncio.Event()
        nc = await self._connect()
        if nc is None:
            raise ConfigurationError(f"cannot connect to NATS at {self.servers}")
        while True:
            try:
                js = nc.jetstream()
                sub = await self._subscribe(js)
                if ready is not None:
                    ready.set()
                await self._consume(js, sub, stop)
                return self.counts
            except ConnectionClosedError:
                if stop.is_set():
                    return self.counts
                log.warning("nats:%s: the connection closed; connecting again", self.stream)
            finally:
                await nc.close()
            while (nc := await self._connect()) is None:
                await pause(stop, _RECONNECT_WAIT)
                if stop.is_set():
                    return self.counts

    async def _connect(self) -> NatsClient | None:
        """A connection (the client reconnects by itself a few times, then gives up and
        :meth:`run` connects again); None when no server answers."""
        try:
            return await nats.connect(
                self.servers, connect_timeout=5, reconnect_time_wait=_RECONNECT_WAIT,
                max_reconnect_attempts=3, error_cb=self._error,
                disconnected_cb=self._disconnected)
        except (NoServersError, OSError) as exc:
            log.warning("nats:%s: cannot connect to %s (%s)", self.stream, self.servers,
                        type(exc).__name__)
            return None

    async def _error(self, exc: Exception) -> None:
        log.warning("nats:%s: %s: %s", self.stream, type(exc).__name__, exc)

    async def _disconnected(self) -> None:
        log.info("nats:%s: disconnected from the server", self.stream)

    async def _subscribe(self, js: JetStreamContext) -> JetStreamContext.PullSubscription:
        try:
            await js.stream_info(self.stream)
        except NotFoundError:
            raise ConfigurationError(f"NATS has no stream {self.stream!r}") from None
        if self.dead_letter is not None:
            try:
                await js.find_stream_name_by_subject(self.dead_letter)
            except NotFoundError:
                raise ConfigurationError(
                    f"no stream captures the dead-letter subject {self.dead_letter!r}: add "
                    "it to a stream, or dead letters would be lost") from None
        try:
            info = await js.consumer_info(self.stream, self.durable)
        except NotFoundError:
            info = None
        if info is not None and info.config.filter_subject not in (None, self.subject):
            raise ConfigurationError(
                f"consumer {self.durable!r} of stream {self.stream!r} reads "
                f"{info.config.filter_subject!r}, not {self.subject!r}: name another durable")
        config = ConsumerConfig(
            durable_name=self.durable, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL, ack_wait=self.ack_wait, max_ack_pending=1,
            filter_subject=self.subject)
        return await js.pull_subscribe(self.subject, durable=self.durable,
                                       stream=self.stream, config=config)

    async def _consume(self, js: JetStreamContext, sub: JetStreamContext.PullSubscription,
                       stop: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                fetch = asyncio.ensure_future(sub.fetch(1, timeout=_FETCH_WAIT))
                await asyncio.wait({fetch, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not fetch.done():
                    # An unacknowledged message a cancelled pull brought is delivered
                    # again after ack_wait.
                    fetch.cancel()
                    await asyncio.gather(fetch, return_exceptions=True)
                    break
                try:
                    msgs = fetch.result()
                except NatsTimeout:
                    continue
                except ConnectionClosedError:
                    raise
                except Exception as exc:
                    log.warning("nats:%s: pull failed (%s: %s); pulling again", self.stream,
                                type(exc).__name__, exc)
                    await pause(stop, 1.0)
                    continue
                for msg in msgs:
                    await self.handler.handle(
                        _delivery(msg, js, self.stream, self.dead_letter), stop)
        finally:
            stopping.cancel()
