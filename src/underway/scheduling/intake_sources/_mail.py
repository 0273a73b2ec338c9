"""An e-mail read as an intake event (stdlib :mod:`email`).

The idempotency key is the ``Message-ID`` (without its angle brackets); the entity is the
conversation (the first ``References`` id, else ``In-Reply-To``, else the message's own
id), so replies reach the run the first mail started, or the sender's address. The payload
holds the sender, recipients, subject, date, the text body and the attachments: each with
its name, type, size and SHA-256, and its content in base64 — stored once, as a
content-addressed blob, when the run journals it — or, over the size limit or when
attachments are skipped, a note saying why it was left out.
"""

from __future__ import annotations

import base64
import email
import email.policy
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any, Literal

from ...errors import ConfigurationError
from ...events import JSON
from ..intake import IntakeError, IntakeEvent
from ._messages import MalformedMessage

DEFAULT_MAX_ATTACHMENT = 1024 * 1024
"""Bytes of one attachment taken in by default; a larger one is left out with a note."""
_ID = re.compile(r"<([^<>\s]+)>")


@dataclass(frozen=True, slots=True, kw_only=True)
class MailOptions:
    """How e-mails become intake events.

    ``event_type`` is every mail's event type (routes match on it); ``entity`` is
    ``"thread"`` (the conversation) or ``"sender"`` (the From address); ``attachments``
    is ``"include"`` (each up to ``max_attachment`` bytes, in base64) or ``"skip"``."""

    tenant_id: str = "default"
    source: str = "mail"
    event_type: str = "mail.received"
    entity: Literal["thread", "sender"] = "thread"
    attachments: Literal["include", "skip"] = "include"
    max_attachment: int = DEFAULT_MAX_ATTACHMENT

    def __post_init__(self) -> None:
        for name in ("tenant_id", "source", "event_type"):
            if not getattr(self, name):
                raise ConfigurationError(f"MailOptions: {name} must not be empty")
        if self.entity not in ("thread", "sender"):
            raise ConfigurationError(
                f"MailOptions: entity must be 'thread' or 'sender', not {self.entity!r}")
        if self.attachments not in ("include", "skip"):
            raise ConfigurationError(
                f"MailOptions: attachments must be 'include' or 'skip', not "
                f"{self.attachments!r}")
        if self.max_attachment < 0:
            raise ConfigurationError("MailOptions: max_attachment must not be negative")


def _ids(value: object) -> list[str]:
    """The message ids in a header (``<a@b> <c@d>``), without brackets."""
    text = "" if value is None else str(value)
    found = _ID.findall(text)
    return found or ([text.strip()] if text.strip() and " " not in text.strip() else [])


def _addresses(msg: EmailMessage, name: str) -> list[str]:
    header: Any = msg.get(name)
    if header is None:
        return []
    try:
        # RFC 5322 addresses have a domain: "root" or "not an address" are no sender.
        return [a.addr_spec for a in header.addresses if a.username and a.domain]
    except (AttributeError, ValueError, IndexError):
        return []


def _date(msg: EmailMessage) -> datetime | None:
    header: Any = msg.get("Date")
    try:
        when = getattr(header, "datetime", None)
    except (ValueError, TypeError):
        return None
    if not isinstance(when, datetime):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _text(msg: EmailMessage) -> tuple[str | None, str | None]:
    """(plain text body, HTML body when there is no plain one)."""
    try:
        plain = msg.get_body(preferencelist=("plain",))
        if plain is not None:
            return str(plain.get_content()), None
        html = msg.get_body(preferencelist=("html",))
        return None, None if html is None else str(html.get_content())
    except (LookupError, ValueError, KeyError) as exc:
        raise MalformedMessage(f"the mail's body cannot be read: {exc}") from None


def _attachments(msg: EmailMessage, options: MailOptions) -> list[JSON]:
    found: list[JSON] = []
    for part in msg.iter_attachments():
        raw = part.get_payload(decode=True)
        data = raw if isinstance(raw, bytes) else b""
        item: dict[str, JSON] = {
            "filename": part.get_filename(), "content_type": part.get_content_type(),
            "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        }
        if options.attachments == "skip":
            item["skipped"] = "attachments are not taken in (attachments='skip')"
        elif len(data) > options.max_attachment:
            item["skipped"] = (f"larger than the limit of {options.max_attachment} bytes "
                               "(max_attachment)")
        else:
            item["content_base64"] = base64.b64encode(data).decode("ascii")
        found.append(item)
    return found


def event_from_mail(raw: bytes, options: MailOptions,
                    received_at: datetime | None = None) -> IntakeEvent:
    """The intake event of the e-mail ``raw`` (see the module's docstring).

    Args:
        raw: The e-mail.
        options: How mail maps to events.
        received_at: When it arrived. ``occurred_at`` is the ``Date`` header, else this,
            else now.

    Raises:
        MalformedMessage: A mail without a ``Message-ID`` or a ``From`` address, or one that
            cannot be parsed. It names the problem.
    """
    try:
        payload, date = _read(raw, options)
    except MalformedMessage:
        raise
    except Exception as exc:
        # The email package meets hostile input with many kinds of error: each is the
        # mail's problem, named in the dead letter.
        raise MalformedMessage(
            f"the mail cannot be parsed: {type(exc).__name__}: {exc}") from None
    sender, thread = str(payload["from"]), str(payload["thread"])
    try:
        return IntakeEvent.parse({
            "tenant_id": options.tenant_id,
            "entity_id": thread if options.entity == "thread" else sender.lower(),
            "event_type": options.event_type,
            "occurred_at": date or received_at or datetime.now(UTC),
            "source": options.source, "idempotency_key": payload["message_id"],
            "payload": payload,
        })
    except IntakeError as exc:
        raise MalformedMessage(str(exc)) from None


def _read(raw: bytes, options: MailOptions) -> tuple[dict[str, JSON], datetime | None]:
    """The payload of the mail ``raw`` and its date."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    own = _ids(msg.get("Message-ID"))
    if not own:
        raise MalformedMessage("the mail has no Message-ID header (it is the idempotency key)")
    senders = _addresses(msg, "From")
    if not senders:
        raise MalformedMessage("the mail has no readable From address")
    references = _ids(msg.get("References"))
    in_reply_to = _ids(msg.get("In-Reply-To"))
    text, html = _text(msg)
    date = _date(msg)
    payload: dict[str, JSON] = {
        "message_id": own[0], "from": senders[0], "to": _addresses(msg, "To"),
        "cc": _addresses(msg, "Cc"), "subject": str(msg.get("Subject") or ""),
        "date": None if date is None else date.isoformat(),
        "in_reply_to": in_reply_to[0] if in_reply_to else None, "references": references,
        "thread": (references or in_reply_to or own)[0], "text": text,
        "attachments": _attachments(msg, options),
    }
    if html is not None:
        payload["html"] = html
    return payload, date
