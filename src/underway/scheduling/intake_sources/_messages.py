"""A queued message's body read as an intake event, and what a dead letter carries.

A message's body is a JSON object with the fields of a webhook delivery
(:class:`MessageBody`); the consumer supplies the rest: the tenant (its own; a body that
names another is refused), the source, and — when the body has no ``idempotency_key`` —
the key from the broker's message id. Anything wrong with a message is a
:class:`MalformedMessage` naming the problem: the message goes to the dead letters.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, ValidationError

from ...errors import FieldProblem
from ...events import JSON, canonical_json
from ..intake import IntakeError, IntakeEvent

__all__ = ["REASON_HEADER", "SOURCE_HEADER", "MalformedMessage", "MessageBody", "event_from_body"]

REASON_HEADER = "Underway-Dead-Letter-Reason"
"""The header of a dead letter that says why its message could not be acted on."""
SOURCE_HEADER = "Underway-Dead-Letter-Source"
"""The header of a dead letter that names where its message was read from."""

_REASON_LIMIT = 1000
"""Characters of a reason kept in a header (the body keeps all of it)."""


class MalformedMessage(IntakeError):
    """A message intake cannot act on (not JSON, not an event, no idempotency key, another
    tenant's, no route, refused by its route); the message says which. Its message goes
    to the dead letters, never back to the queue."""


class MessageBody(BaseModel):
    """The JSON body of a queued message: which entity, what type, the payload.

    ``idempotency_key`` defaults to the broker's message id; ``occurred_at`` to when the
    broker took the message (else when it was read). ``tenant_id``, when given, must be
    the consumer's tenant."""

    model_config = ConfigDict(extra="forbid")

    entity_id: str = Field(min_length=1)
    event_type: str = Field(min_length=1)
    idempotency_key: str | None = Field(default=None, min_length=1)
    occurred_at: AwareDatetime | None = None
    tenant_id: str | None = Field(default=None, min_length=1)
    permissions: list[str] = Field(default_factory=list)
    payload: JsonValue = None
    purpose: str | None = None
    """What the event asks to be acted on for (default: the route's purpose)."""
    consent: str | None = Field(default=None, min_length=1, max_length=200)
    """The reference of the consent the event comes with."""


def _problems(exc: ValidationError, prefix: str) -> str:
    return "; ".join(
        f"{'.'.join([prefix, *map(str, e['loc'])])}: {e['msg']}"
        for e in exc.errors(include_url=False)
    )


def event_from_body(
    body: bytes, *, tenant_id: str, source: str, message_id: str | None,
    received_at: datetime | None = None,
) -> IntakeEvent:
    """The intake event a message's ``body`` describes.

    Args:
        body: The message's body.
        tenant_id: The tenant.
        source: The source it came from.
        message_id: The broker's id of the message. It is the idempotency key when the body
            gives none. A message with neither is refused: acting on it could not be made to
            happen once.
        received_at: When the broker took it; by default, now.

    Raises:
        MalformedMessage: It describes no event. It names the problem.
    """
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedMessage(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise MalformedMessage("the body's JSON nests too deeply to be read") from None
    if not isinstance(data, dict):
        raise MalformedMessage(f"the body must be a JSON object, not {type(data).__name__}")
    try:
        msg = MessageBody.model_validate(data)
    except ValidationError as exc:
        raise MalformedMessage(f"invalid event: {_problems(exc, 'body')}") from None
    except RecursionError:
        raise MalformedMessage("the body's JSON nests too deeply to be read") from None
    if msg.tenant_id is not None and msg.tenant_id != tenant_id:
        raise MalformedMessage(
            f"the body names tenant {msg.tenant_id!r}; this consumer takes events for tenant "
            f"{tenant_id!r}")
    key = msg.idempotency_key or message_id
    if not key:
        raise MalformedMessage(
            "no idempotency key: give the body an idempotency_key, or the message an id")
    occurred = msg.occurred_at or received_at or datetime.now(UTC)
    try:
        return IntakeEvent.parse({
            "tenant_id": tenant_id, "entity_id": msg.entity_id, "event_type": msg.event_type,
            "occurred_at": occurred, "source": source, "permissions": msg.permissions,
            "idempotency_key": key, "payload": msg.payload, "purpose": msg.purpose,
            "consent": msg.consent,
        })
    except IntakeError as exc:
        raise MalformedMessage(str(exc)) from None


def header_reason(reason: str, limit: int = _REASON_LIMIT) -> str:
    """``reason`` fit for a message header: one line of printable ASCII, cut to
    ``limit`` characters."""
    line = re.sub(r"\s+", " ", reason).strip()
    line = line.encode("ascii", "backslashreplace").decode("ascii")
    return line if len(line) <= limit else line[:limit - 3] + "..."


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What a dead letter says: why, where from, the message's id, its headers and its
    body (as text when it is UTF-8, else base64). When the event's input did not fit its
    flow, ``errors`` lists each bad field (loc, msg, type), as the webhook's 422 does."""

    reason: str
    source: str
    message_id: str | None
    body: bytes
    headers: Mapping[str, str]
    errors: tuple[FieldProblem, ...] = ()

    def encode(self) -> bytes:
        """The dead letter's JSON body."""
        doc: dict[str, JSON] = {
            "reason": self.reason, "source": self.source, "message_id": self.message_id,
            "headers": dict(self.headers),
        }
        if self.errors:
            doc["errors"] = [{"loc": list(p.loc), "msg": p.msg, "type": p.type}
                             for p in self.errors]
        try:
            doc["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            doc["body_base64"] = base64.b64encode(self.body).decode("ascii")
        return canonical_json(doc)

    def header_fields(self) -> dict[str, str]:
        """The message's own headers with the reason and the source added."""
        return {**self.headers, REASON_HEADER: header_reason(self.reason),
                SOURCE_HEADER: header_reason(self.source)}
