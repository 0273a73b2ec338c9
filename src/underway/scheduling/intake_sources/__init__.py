"""Intake from queues and mail: outside events read from NATS JetStream, RabbitMQ or a
maildir, acted on once through :func:`underway.scheduling.intake.intake`.

- :class:`NatsIntake`: a durable JetStream pull consumer (the ``nats`` extra);
- :class:`RabbitMQIntake`: a RabbitMQ queue consumer (the ``rabbitmq`` extra);
- :class:`MaildirIntake`: a watcher of a maildir's ``new`` folder (stdlib only), with
  :class:`MailOptions` and :func:`event_from_mail`;
- :class:`MessageBody` and :func:`event_from_body`: what a queued message holds and the
  event it becomes; :class:`MalformedMessage`: a message that is none;
- :class:`MessageHandler`, :class:`Outcome`, :class:`IntakeCounts`: the one path every
  queued message takes (read, act, acknowledge after the commit; dead-letter the
  malformed; hand back on a store failure), over a broker's :class:`Delivery`;
  :class:`DeadLetter`: what a dead letter carries.

A message is acknowledged (a mail filed as seen) only after its intake committed; one
delivered again — after a crash, a lost acknowledgement, a redelivery — acts once, since
intake acts once per idempotency key. See docs/intake.md.

nats-py and aio-pika are imported the first time :class:`NatsIntake` or
:class:`RabbitMQIntake` is named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports
from ._handling import (
    AFTER_COMMIT,
    AFTER_DEAD_LETTER,
    BEFORE_COMMIT,
    Delivery,
    IntakeCounts,
    MessageHandler,
    Outcome,
)
from ._mail import MailOptions, event_from_mail
from ._maildir import MaildirIntake
from ._messages import (
    REASON_HEADER,
    SOURCE_HEADER,
    DeadLetter,
    MalformedMessage,
    MessageBody,
    event_from_body,
)

if TYPE_CHECKING:
    from ._nats import NatsIntake
    from ._rabbitmq import RabbitMQIntake
else:
    __getattr__, __dir__ = lazy_exports(
        __name__, {"NatsIntake": "._nats", "RabbitMQIntake": "._rabbitmq"}, globals())

__all__ = [
    "AFTER_COMMIT",
    "AFTER_DEAD_LETTER",
    "BEFORE_COMMIT",
    "REASON_HEADER",
    "SOURCE_HEADER",
    "DeadLetter",
    "Delivery",
    "IntakeCounts",
    "MailOptions",
    "MaildirIntake",
    "MalformedMessage",
    "MessageBody",
    "MessageHandler",
    "NatsIntake",
    "Outcome",
    "RabbitMQIntake",
    "event_from_body",
    "event_from_mail",
]
