"""Notifiers deliver notices to real local endpoints (an HTTP server, an SMTP sink: see
``fakes.receivers``) and never fail the caller when delivery fails."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import socket
from collections.abc import Iterator

import pytest

from fakes.receivers import Endpoint, SmtpSink
from underway.errors import ConfigurationError
from underway.guard.approvals.notify import (
    ApprovalNotice,
    LogNotifier,
    MultiNotifier,
    SmtpNotifier,
    WebhookNotifier,
    webhook_signature,
)

NOTICE = ApprovalNotice(
    tenant_id="acme", run_id="run-7", request_id="req-3", tool="refund",
    args={"customer": "c-17", "amount": 1200}, evidence={"ticket": "T-9"},
    risks=("irreversible", "over 1000 EUR"), required_role="finance", expires_at=1_700_003_600.0,
)
QUESTION = ApprovalNotice(
    tenant_id="acme", run_id="run-8", request_id="req-4", tool="", args=None,
    required_role=None, expires_at=1_700_003_600.0, kind="question",
    question="Which warehouse ships the replacement?",
)


# -- a local HTTP endpoint ------------------------------------------------------------------


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_webhook_posts_the_notice_as_json(endpoint: Endpoint) -> None:
    asyncio.run(WebhookNotifier(endpoint.url).notify(NOTICE))
    [(headers, body)] = endpoint.received
    assert headers["Content-Type"] == "application/json"
    assert "X-Underway-Signature" not in headers
    assert json.loads(body) == {
        "kind": "approval", "tenant_id": "acme", "run_id": "run-7", "request_id": "req-3",
        "tool": "refund", "args": {"customer": "c-17", "amount": 1200},
        "evidence": {"ticket": "T-9"}, "risks": ["irreversible", "over 1000 EUR"],
        "required_role": "finance", "expires_at": 1_700_003_600.0, "question": None,
    }


def test_the_webhook_signs_the_body_with_the_shared_secret(endpoint: Endpoint) -> None:
    asyncio.run(WebhookNotifier(endpoint.url, secret="s3cret").notify(NOTICE))
    [(headers, body)] = endpoint.received
    expected = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers["X-Underway-Signature"] == expected == webhook_signature(body, "s3cret")


def test_a_webhook_error_status_is_logged_not_raised(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint.status = 500
    with caplog.at_level(logging.WARNING, logger="underway.approvals"):
        asyncio.run(WebhookNotifier(endpoint.url).notify(NOTICE))
    assert len(endpoint.received) == 1
    assert "not delivered" in caplog.text and "500" in caplog.text and "run-7" in caplog.text


def test_an_unreachable_webhook_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{closed_port()}/hook"
    with caplog.at_level(logging.WARNING, logger="underway.approvals"):
        asyncio.run(WebhookNotifier(url, timeout=2).notify(NOTICE))
    assert "not delivered" in caplog.text and "req-3" in caplog.text


def test_a_webhook_needs_an_http_url() -> None:
    with pytest.raises(ConfigurationError, match="http"):
        WebhookNotifier("ftp://example.org/hook")
    with pytest.raises(ConfigurationError, match="timeout"):
        WebhookNotifier("https://example.org/hook", timeout=0)


# -- a local SMTP sink ----------------------------------------------------------------------


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    s = SmtpSink()
    yield s
    s.close()


RECIPIENTS = {"finance": ["cfo@acme.test", "ap@acme.test"], "*": ["audit@acme.test"]}


def test_an_email_goes_to_the_required_roles_people(sink: SmtpSink) -> None:
    notifier = SmtpNotifier("127.0.0.1", sink.port, sender="underway@acme.test",
                            recipients=RECIPIENTS)
    asyncio.run(notifier.notify(NOTICE))
    [(sender, rcpts, message)] = sink.messages
    assert sender == "underway@acme.test"
    assert rcpts == ["cfo@acme.test", "ap@acme.test", "audit@acme.test"]
    assert message["Subject"] == "[underway] approval needed: refund (run run-7)"
    text = message.get_content()
    assert '"amount": 1200' in text and "over 1000 EUR" in text and "finance" in text
    assert "underway approvals approve run-7 --tenant acme --key FILE --as YOU" in text
    assert "2023-11-14T23:13:20+00:00" in text


def test_a_question_without_a_role_goes_to_everyone_listed_under_star(sink: SmtpSink) -> None:
    notifier = SmtpNotifier("127.0.0.1", sink.port, sender="underway@acme.test",
                            recipients=RECIPIENTS, username="bot", password="pw")
    asyncio.run(notifier.notify(QUESTION))
    [(_, rcpts, message)] = sink.messages
    assert rcpts == ["audit@acme.test"]
    assert sink.logins == [("bot", "pw")]
    assert "Which warehouse ships the replacement?" in message.get_content()
    assert "underway approvals answer run-8 --tenant acme" in message.get_content()


DRIFT = ApprovalNotice(
    tenant_id="acme", run_id="*", request_id="drift:*:2027-01-15T08:00:00+00:00", tool="",
    args=None, kind="drift", evidence={"drifted": ["tool_error_rate"]},
    question="1 metric drifted for every flow: tool_error_rate 6.0% -> 26.3% (+20.2 pp)")


def test_a_drift_notice_goes_to_everyone_listed_under_star(
    sink: SmtpSink, caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = SmtpNotifier("127.0.0.1", sink.port, sender="underway@acme.test",
                            recipients=RECIPIENTS)
    asyncio.run(notifier.notify(DRIFT))
    [(_, rcpts, message)] = sink.messages
    assert rcpts == ["audit@acme.test"]
    assert message["Subject"] == "[underway] drift in tenant acme"
    text = message.get_content()
    assert "tool_error_rate 6.0% -> 26.3%" in text and "underway drift --tenant acme" in text
    assert "approve" not in text
    with caplog.at_level(logging.INFO, logger="underway.approvals"):
        asyncio.run(LogNotifier().notify(DRIFT))
    assert "tenant acme: 1 metric drifted" in caplog.text


def test_a_notice_nobody_is_listed_for_is_logged(
    sink: SmtpSink, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = SmtpNotifier("127.0.0.1", sink.port, sender="u@acme.test",
                            recipients={"legal": ["gc@acme.test"]})
    with caplog.at_level(logging.WARNING, logger="underway.approvals"):
        asyncio.run(notifier.notify(NOTICE))
    assert sink.messages == []
    assert "nobody to notify" in caplog.text and "finance" in caplog.text


def test_an_unreachable_mail_server_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = SmtpNotifier("127.0.0.1", closed_port(), sender="u@acme.test",
                            recipients=RECIPIENTS, timeout=2)
    with caplog.at_level(logging.WARNING, logger="underway.approvals"):
        asyncio.run(notifier.notify(NOTICE))
    assert "not delivered" in caplog.text and "run-7" in caplog.text


def test_smtp_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="username and password"):
        SmtpNotifier("mail", sender="u@x", recipients={}, username="bot")
    with pytest.raises(ConfigurationError, match="sender"):
        SmtpNotifier("mail", sender="", recipients={})


# -- logging and fan-out --------------------------------------------------------------------


def test_the_log_notifier_names_the_run_but_not_the_arguments(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="underway.approvals"):
        asyncio.run(LogNotifier().notify(NOTICE))
    assert "run-7" in caplog.text and "refund" in caplog.text and "finance" in caplog.text
    assert "c-17" not in caplog.text


class Exploding:
    async def notify(self, notice: ApprovalNotice) -> None:
        raise RuntimeError("pager service is down")


def test_one_failing_notifier_does_not_stop_the_others(
    endpoint: Endpoint, caplog: pytest.LogCaptureFixture
) -> None:
    both = MultiNotifier(Exploding(), WebhookNotifier(endpoint.url))
    with caplog.at_level(logging.WARNING, logger="underway.approvals"):
        asyncio.run(both.notify(NOTICE))
    assert len(endpoint.received) == 1
    assert "Exploding" in caplog.text and "pager service is down" in caplog.text
