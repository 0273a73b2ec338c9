"""Telling people that a run waits for them — an approval to sign or a question to answer —
and that agents drift (``underway drift --notify``).

A :class:`Notifier` is anything with ``async def notify(notice) -> None``. The ones here
log (:class:`LogNotifier`), POST JSON to a URL (:class:`WebhookNotifier`), send e-mail by
role (:class:`SmtpNotifier`) or fan out to several (:class:`MultiNotifier`).

A notice is a courtesy, not part of the run's truth: every notifier here logs its failure
and returns normally, so an unreachable mail server or webhook never fails a run. The
decision itself is made with ``underway approvals show|approve|reject|answer``, which
read the request from the journal, not from the notice.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol
from urllib.parse import urlsplit

from ...errors import ConfigurationError
from ...events import JSON, canonical_json

__all__ = [
    "ApprovalNotice",
    "LogNotifier",
    "MultiNotifier",
    "Notifier",
    "SmtpNotifier",
    "WebhookNotifier",
    "webhook_signature",
]

log = logging.getLogger("underway.approvals")

SIGNATURE_HEADER = "X-Underway-Signature"


@dataclass(frozen=True, slots=True)
class ApprovalNotice:
    """What a person needs to know about one request: which run waits, for what action
    (``tool`` with ``args``) or ``question``, why (``evidence``, ``risks``), who may decide
    (``required_role``) and until when (``expires_at``, epoch seconds; 0 for no expiry).

    ``kind`` is ``approval``, ``question``, or ``escalation``: a run stopped for a person to
    resolve (an unknown outcome, a deadline, a budget), with the reason in ``question``
    and the call's tool, if any, in ``tool``; or ``drift``: metrics of a tenant's runs
    moved (``underway drift --notify``), said in ``question``, the whole report in
    ``evidence``, with ``run_id`` ``*``."""

    tenant_id: str
    run_id: str
    request_id: str
    tool: str
    args: JSON
    evidence: JSON = None
    risks: Sequence[str] = ()
    required_role: str | None = None
    expires_at: float = 0.0
    kind: Literal["approval", "question", "escalation", "drift"] = "approval"
    question: str | None = None

    def to_json(self) -> dict[str, JSON]:
        """The notice as a JSON object (what a webhook receives)."""
        return {
            "kind": self.kind, "tenant_id": self.tenant_id, "run_id": self.run_id,
            "request_id": self.request_id, "tool": self.tool, "args": self.args,
            "evidence": self.evidence, "risks": list(self.risks),
            "required_role": self.required_role, "expires_at": self.expires_at,
            "question": self.question,
        }


class Notifier(Protocol):
    """Delivers notices. Implementations must not raise for a failed delivery: log it."""

    async def notify(self, notice: ApprovalNotice) -> None:
        """Tell the right people about ``notice``."""
        ...


def _expiry(notice: ApprovalNotice) -> str:
    if notice.expires_at <= 0 or notice.expires_at == float("inf"):
        return "never"
    return datetime.fromtimestamp(notice.expires_at, UTC).isoformat(timespec="seconds")


def _what(notice: ApprovalNotice) -> str:
    if notice.kind == "question":
        return f"question {notice.question!r}"
    if notice.kind == "escalation":
        return f"a resolution ({notice.question})"
    return f"approval of {notice.tool!r}"


class LogNotifier:
    """Logs one line per notice on ``logger`` (default ``underway.approvals``).

    The arguments are not logged: logs travel further than the journal, and
    ``underway approvals show RUN`` prints them to whoever may see them.
    """

    def __init__(self, *, logger: logging.Logger | None = None, level: int = logging.INFO):
        self.logger = logger or log
        self.level = level

    async def notify(self, notice: ApprovalNotice) -> None:
        """Log the notice."""
        if notice.kind == "drift":
            self.logger.log(self.level, "tenant %s: %s", notice.tenant_id, notice.question)
            return
        self.logger.log(
            self.level,
            "run %s (tenant %s) waits for %s, request %s, role %s, until %s",
            notice.run_id, notice.tenant_id, _what(notice), notice.request_id,
            notice.required_role or "any", _expiry(notice),
        )


def webhook_signature(body: bytes, secret: str | bytes) -> str:
    """The hex HMAC-SHA256 of ``body`` under ``secret``: the value of the
    ``X-Underway-Signature`` header, which a receiver recomputes to trust a notice."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, body, hashlib.sha256).hexdigest()


class WebhookNotifier:
    """POSTs each notice as JSON to ``url``.

    The body is :meth:`ApprovalNotice.to_json`, in canonical encoding. A response other than
    2xx, a timeout or a connection failure is logged as a warning.

    Args:
        url: Where notices go.
        secret: Makes the ``X-Underway-Signature`` header carry :func:`webhook_signature` of
            the body.
        timeout: Seconds to wait for the answer.
    """

    def __init__(self, url: str, *, secret: str | bytes | None = None, timeout: float = 10.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(f"webhook URL {url!r} must be an http:// or https:// URL")
        if not timeout > 0:
            raise ConfigurationError(f"webhook timeout must be positive, not {timeout}")
        self.url = url
        self.secret = secret
        self.timeout = timeout

    async def notify(self, notice: ApprovalNotice) -> None:
        """POST the notice; log and return on any failure."""
        body = canonical_json(notice.to_json())
        try:
            status = await asyncio.to_thread(self._post, body)
        except Exception as exc:
            log.warning(
                "webhook %s: notice for run %s request %s not delivered: %s",
                self.url, notice.run_id, notice.request_id, _reason(exc),
            )
            return
        log.debug("webhook %s: notice for run %s answered %s", self.url, notice.run_id, status)

    def _post(self, body: bytes) -> int:
        import urllib.request

        headers = {"Content-Type": "application/json", "User-Agent": "underway"}
        if self.secret is not None:
            headers[SIGNATURE_HEADER] = webhook_signature(body, self.secret)
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return int(response.status)


class SmtpNotifier:
    """E-mails each notice to the addresses listed for its required role.

    A notice nobody is listed for, or a failed delivery, is logged as a warning.

    Args:
        host: The SMTP server.
        port: Its port.
        sender: The ``From`` address.
        recipients: Maps a role to addresses. Addresses under ``"*"`` receive every notice.
            They are the only ones for a request that requires no role.
        starttls: Upgrade the connection before logging in.
        username: The login, if any.
        password: The login's password.
        timeout: Seconds to wait for the server.
    """

    def __init__(
        self,
        host: str,
        port: int = 25,
        *,
        sender: str,
        recipients: Mapping[str, Sequence[str]],
        starttls: bool = False,
        username: str | None = None,
        password: str | None = None,
        timeout: float = 10.0,
    ):
        if not host:
            raise ConfigurationError("an SMTP notifier needs a host")
        if not sender:
            raise ConfigurationError("an SMTP notifier needs a sender address")
        if (username is None) != (password is None):
            raise ConfigurationError("give both username and password to log in, or neither")
        self.host = host
        self.port = port
        self.sender = sender
        self.recipients = {role: list(addrs) for role, addrs in recipients.items()}
        self.starttls = starttls
        self.username = username
        self.password = password
        self.timeout = timeout

    def addresses(self, notice: ApprovalNotice) -> list[str]:
        """Who receives ``notice``: the addresses of its role, then those under ``"*"``."""
        found = list(self.recipients.get(notice.required_role or "*", []))
        found += self.recipients.get("*", [])
        return list(dict.fromkeys(found))

    async def notify(self, notice: ApprovalNotice) -> None:
        """Send the e-mail; log and return on any failure."""
        to = self.addresses(notice)
        if not to:
            log.warning(
                "smtp: nobody to notify for run %s request %s (role %s)",
                notice.run_id, notice.request_id, notice.required_role or "any",
            )
            return
        try:
            await asyncio.to_thread(self._send, notice, to)
        except Exception as exc:
            log.warning(
                "smtp %s:%s: notice for run %s request %s not delivered: %s",
                self.host, self.port, notice.run_id, notice.request_id, _reason(exc),
            )

    def _send(self, notice: ApprovalNotice, to: list[str]) -> None:
        import smtplib
        from email.message import EmailMessage

        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(to)
        subject = {
            "question": f"question from run {notice.run_id}",
            "escalation": f"run {notice.run_id} escalated",
            "drift": f"drift in tenant {notice.tenant_id}",
        }.get(notice.kind, f"approval needed: {notice.tool} (run {notice.run_id})")
        message["Subject"] = f"[underway] {subject}"
        message.set_content(email_body(notice))
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            if self.starttls:
                smtp.starttls()
            if self.username is not None and self.password is not None:
                smtp.login(self.username, self.password)
            smtp.send_message(message, from_addr=self.sender, to_addrs=to)


def email_body(notice: ApprovalNotice) -> str:
    """The plain-text e-mail an approver receives for ``notice``."""
    tenant = "" if notice.tenant_id == "default" else f" --tenant {notice.tenant_id}"
    if notice.kind == "drift":
        return "\n".join([
            f"Agents of tenant {notice.tenant_id} drifted.", "", f"{notice.question}", "",
            "See every metric with its baseline, window, samples and p-value:",
            f"  underway drift{tenant}", "",
        ])
    lines = [f"Run {notice.run_id} (tenant {notice.tenant_id}) waits for you.", ""]
    if notice.kind == "question":
        lines += [f"Question: {notice.question}", ""]
    elif notice.kind == "escalation":
        lines += [f"Escalated: {notice.question}", ""]
        if notice.tool:
            lines += [f"Call: {notice.tool}", ""]
    else:
        lines += [
            f"Action: {notice.tool}",
            "Arguments:",
            json.dumps(notice.args, indent=2, sort_keys=True, ensure_ascii=False, default=str),
            "",
        ]
    if notice.evidence is not None:
        lines += [
            "Evidence:",
            json.dumps(notice.evidence, indent=2, sort_keys=True, ensure_ascii=False,
                       default=str),
            "",
        ]
    if notice.risks:
        lines += ["Risks:", *(f"  - {r}" for r in notice.risks), ""]
    lines += [
        f"Required role: {notice.required_role or 'any approver'}",
        f"Expires: {_expiry(notice)}",
        f"Request: {notice.request_id}",
        "",
        "Review it and decide with your key:",
        f"  underway approvals show {notice.run_id}{tenant}",
    ]
    if notice.kind == "question":
        lines.append(
            f"  underway approvals answer {notice.run_id}{tenant} --key FILE --as YOU "
            "--answer TEXT"
        )
    elif notice.kind == "escalation":
        lines.append(
            f"  underway approvals resolve {notice.run_id}{tenant} --key FILE --as YOU "
            "--outcome succeeded|failed|retry"
        )
    else:
        lines += [
            f"  underway approvals approve {notice.run_id}{tenant} --key FILE --as YOU",
            f"  underway approvals reject {notice.run_id}{tenant} --key FILE --as YOU",
        ]
    return "\n".join(lines) + "\n"


class MultiNotifier:
    """Hands each notice to every notifier at once; one failing (even by raising) does
    not keep the notice from the others."""

    def __init__(self, *notifiers: Notifier):
        self.notifiers = notifiers

    async def notify(self, notice: ApprovalNotice) -> None:
        """Notify all, logging any that raised."""
        outcomes = await asyncio.gather(
            *(n.notify(notice) for n in self.notifiers), return_exceptions=True
        )
        for notifier, outcome in zip(self.notifiers, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.warning(
                    "%s: notice for run %s request %s not delivered: %s",
                    type(notifier).__name__, notice.run_id, notice.request_id,
                    _reason(outcome),
                )
            elif isinstance(outcome, BaseException):
                raise outcome


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
