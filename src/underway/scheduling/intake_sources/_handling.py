"""One path for every queued message: read it, act on it through intake, then settle it
with the broker — acknowledged only after the intake committed, dead-lettered when it is
malformed, handed back with a backoff when the store failed.

A broker adapter (NATS JetStream, RabbitMQ) wraps each message it receives as a
:class:`Delivery` and passes it to :meth:`MessageHandler.handle`; everything that decides
what happens to a message is here, the same for every broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from ... import faults
from ...client import Client
from ...errors import FieldProblem, KeyUnavailable, is_store_failure
from ...retry import RetryPolicy
from ...store._offload import run_io
from ..intake import IntakeError, IntakeEvent, IntakeResult, Routes, intake
from ._messages import DeadLetter, MalformedMessage, event_from_body

log = logging.getLogger("underway.intake")

BEFORE_COMMIT = "intake.before_commit"
"""Fault point: a message was read and is about to be acted on."""
AFTER_COMMIT = "intake.after_commit"
"""Fault point: intake committed (or found the key done); the message is not yet
acknowledged (or, for mail, not yet moved to ``cur``)."""
AFTER_DEAD_LETTER = "intake.after_dead_letter"
"""Fault point: a dead letter was written; its message is not yet acknowledged (moved)."""

DEFAULT_BACKOFF = RetryPolicy(initial_interval=0.5, backoff=2.0, max_interval=30.0)
"""How long a consumer waits after a store failure before it takes messages again: half a
second after the first, doubling to thirty (full jitter); reset by a success."""


class Delivery(Protocol):
    """A message received from a broker, to be settled exactly once."""

    body: bytes
    message_id: str | None
    """The broker's id of the message (the idempotency key when the body gives none)."""
    headers: dict[str, str]
    received_at: datetime | None
    """When the broker took the message, if it says."""

    async def ack(self) -> None:
        """Acknowledge: the broker forgets the message."""
        ...

    async def dead_letter(self, letter: DeadLetter) -> None:
        """Write ``letter`` where dead letters go (confirmed by the broker), then
        acknowledge the message; without a dead-letter destination, reject it for good."""
        ...

    async def retry(self, delay: float) -> None:
        """Hand the message back to be delivered again (after ``delay`` seconds where the
        broker can wait)."""
        ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one message.

    ``acted``: intake committed it (``result`` says what it did, ``duplicate`` for a key
    acted on before), then it was acknowledged. ``dead``: it was malformed or intake
    refused or ignored it (``reason``); it went to the dead letters. ``retry``: the store
    failed (``reason``); it was handed back, to be delivered again."""

    action: Literal["acted", "dead", "retry"]
    key: str | None
    result: IntakeResult | None = None
    reason: str = ""


@dataclass
class IntakeCounts:
    """How many messages a consumer acted on, dead-lettered and handed back."""

    acted: int = 0
    duplicates: int = 0
    dead: int = 0
    retried: int = 0


@dataclass
class MessageHandler:
    """Acts on queued messages through :func:`~underway.scheduling.intake.intake` and settles them
    (see the module's docstring). One handler per consumer; messages are handled one at a
    time, in the order the broker delivers them."""

    client: Client
    routes: Routes
    tenant_id: str
    source: str
    backoff: RetryPolicy = DEFAULT_BACKOFF
    counts: IntakeCounts = field(default_factory=IntakeCounts)
    _failures: int = 0

    async def handle(self, delivery: Delivery, stop: asyncio.Event | None = None) -> Outcome:
        """Read, act on and settle ``delivery``; after a store failure, wait out the
        backoff (or until ``stop`` is set) before returning."""
        try:
            event = event_from_body(
                delivery.body, tenant_id=self.tenant_id, source=self.source,
                message_id=delivery.message_id, received_at=delivery.received_at)
        except MalformedMessage as exc:
            return await self._dead(delivery, delivery.message_id, str(exc), stop)
        except Exception as exc:
            # Whatever a message's bytes make the parser do, they must not stop the consumer.
            log.exception("%s: reading message %r failed unexpectedly", self.source,
                          delivery.message_id)
            return await self._dead(delivery, delivery.message_id,
                                    f"unexpected error: {error_text(exc)}", stop)
        faults.point(BEFORE_COMMIT)
        try:
            result = await run_io(self.client.store, self._act, event, _trace(delivery))
        except IntakeError as exc:
            return await self._dead(delivery, event.idempotency_key, str(exc), stop,
                                    exc.errors)
        except Exception as exc:
            if not transient(exc):
                log.exception("intake of %s key %r failed unexpectedly", self.source,
                              event.idempotency_key)
                return await self._dead(delivery, event.idempotency_key,
                                        f"unexpected error: {error_text(exc)}", stop)
            return await self._hand_back(delivery, event.idempotency_key,
                                         f"the store failed ({error_text(exc)})", stop)
        if result.action == "ignored":
            return await self._dead(delivery, event.idempotency_key, result.reason, stop)
        faults.point(AFTER_COMMIT)
        self._failures = 0
        self.counts.acted += 1
        self.counts.duplicates += result.action == "duplicate"
        log.info("%s key %r: %s run %s", self.source, event.idempotency_key, result.action,
                 result.run_id)
        await _settle(delivery.ack(), self.source, event.idempotency_key)
        return Outcome("acted", event.idempotency_key, result)

    def _act(self, event: IntakeEvent, trace: dict[str, str] | None) -> IntakeResult:
        return intake(self.client, event, self.routes, trace_context=trace)

    async def _dead(self, delivery: Delivery, key: str | None, reason: str,
                    stop: asyncio.Event | None,
                    errors: tuple[FieldProblem, ...] = ()) -> Outcome:
        letter = DeadLetter(reason, self.source, key, delivery.body, delivery.headers, errors)
        try:
            await delivery.dead_letter(letter)
        except Exception as exc:
            # The message must not be lost: it stays with the broker until a dead letter
            # can be written.
            return await self._hand_back(
                delivery, key, f"the dead letter could not be written ({error_text(exc)}); "
                f"the message was: {reason}", stop)
        log.warning("%s key %r dead-lettered: %s", self.source, key, reason)
        faults.point(AFTER_DEAD_LETTER)
        self.counts.dead += 1
        return Outcome("dead", key, reason=reason)

    async def _hand_back(self, delivery: Delivery, key: str | None, reason: str,
                         stop: asyncio.Event | None) -> Outcome:
        self._failures += 1
        delay = self.backoff.delay(self._failures + 1, random.random())
        log.warning("%s key %r: %s; handed back, taking messages again in %.1fs",
                    self.source, key, reason, delay)
        await _settle(delivery.retry(delay), self.source, key)
        self.counts.retried += 1
        await pause(stop, delay)
        return Outcome("retry", key, reason=reason)


async def pause(stop: asyncio.Event | None, seconds: float) -> None:
    """Wait ``seconds``, or until ``stop`` is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def error_text(exc: BaseException) -> str:
    """An error as ``Type: message``."""
    return f"{type(exc).__name__}: {exc}".strip()


def transient(exc: BaseException) -> bool:
    """A failure of the store (or of the keys it needs), not of the message: the message
    is handed back and delivered again, never dead-lettered."""
    return is_store_failure(exc) or isinstance(exc, KeyUnavailable | OSError)


def _trace(delivery: Delivery) -> dict[str, str] | None:
    """The W3C trace context a message carries in its headers, if any."""
    lower = {k.lower(): v for k, v in delivery.headers.items()}
    if "traceparent" not in lower:
        return None
    return {k: lower[k] for k in ("traceparent", "tracestate") if k in lower}


async def _settle(settling: Awaitable[None], source: str, key: str | None) -> None:
    """Await an acknowledgement or hand-back; a broker that went away is logged, not
    raised: it delivers the message again, and intake answers ``duplicate``."""
    try:
        await settling
    except Exception as exc:
        log.warning("%s key %r: could not settle the message with the broker (%s: %s); it "
                    "will be delivered again", source, key, type(exc).__name__, exc)
