"""The KYC flow of :mod:`fakes.sensitive_flows` run behind a real ``underway serve``
(:class:`~fakes.service_world.World`), its approval notices delivered to a local webhook
endpoint and SMTP sink: a run that waits for the SMS's approval, and a run that failed on
an error quoting the PAN."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.receivers import Endpoint, SmtpSink
from fakes.sensitive_flows import kyc
from fakes.service_world import World
from underway.guard.approvals import sign_decision
from underway.guard.approvals.notify import MultiNotifier, SmtpNotifier, WebhookNotifier


@dataclass
class KycRuns:
    """The world, the receivers of notices and the runs."""

    world: World
    webhook: Endpoint
    smtp: SmtpSink
    waiting: str
    failed: str
    approver: Ed25519PrivateKey

    def close(self) -> None:
        self.webhook.close()
        self.smtp.close()

    def approve(self) -> None:
        """Olga (role ops) signs the SMS's approval; the run completes."""
        [pending] = self.world.client_pending(self.waiting)
        decision = sign_decision(
            self.approver, request_id=pending["request_id"], run_id=self.waiting,
            tenant_id="acme", tool="send_sms", args_hash=pending["args_hash"],
            decision="approve", expires_at=pending["expires_at"], approver_id="olga",
        ).model_dump(mode="json")
        r = self.world.call("POST", f"/v1/approvals/{self.waiting}/decision", role="approver",
                            json=decision)
        assert r.status_code == 202, r.text
        self.world.drive()


def kyc_runs(world: World) -> KycRuns:
    webhook, smtp = Endpoint(), SmtpSink()
    notifier = MultiNotifier(
        WebhookNotifier(webhook.url),
        SmtpNotifier("127.0.0.1", smtp.port, sender="underway@example.com",
                     recipients={"*": ["ops@example.com"]}))
    world.engine = uw.Engine(world.worker_store, flows=[kyc], clock=world.clock,
                             notifier=notifier)
    runs = []
    for fail in (False, True):
        r = world.call("POST", "/v1/runs", role="operator",
                       json={"flow": "kyc", "input": {"customer": "C1", "fail": fail}})
        assert r.status_code == 201, r.text
        runs.append(str(r.json()["run_id"]))
    world.drive()
    approver = world.approver("acme", "olga", "ops")
    found = KycRuns(world, webhook, smtp, runs[0], runs[1], approver)
    wait_for(lambda: webhook.received and smtp.messages, "the notices")
    return found


def wait_for(condition: Callable[[], Any], what: str, deadline: float = 30.0) -> None:
    """Poll ``condition`` until it holds (failing after ``deadline`` seconds)."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def read_stream(http: httpx.Client, url: str, *, last_seq: int | None = None,
                headers: dict[str, str] | None = None) -> str:
    """The text of a Server-Sent Events stream, read until the event ``last_seq`` (None:
    until the stream ends)."""
    seen: list[str] = []
    with http.stream("GET", url, headers=headers or {}) as r:
        assert r.status_code == 200, r.read()
        last = False
        for line in r.iter_lines():
            seen.append(line)
            if line.startswith("event: end") or (last and line == ""):
                break
            last = last or line == f"id: {last_seq}"
    return "\n".join(seen)
