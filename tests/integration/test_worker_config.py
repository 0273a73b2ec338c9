"""``underway worker --config`` and ``underway serve --config`` as a user runs them: real
processes reading one ``underway.toml``. The worker alerts approvers through the webhook
or the SMTP server the file names (local ones served by the test, with the secrets taken
from the environment variables it names), holds each tenant to its budget, refuses an
unsigned resolution and exports its spans over OTLP; the server listens where the file
says and refuses unsigned resolutions. Every wait polls a condition with a deadline."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from fakes.receivers import Endpoint, SmtpSink
from underway import events as ev
from underway.cli import app as cli
from underway.client import Client

HERE = Path(__file__).resolve().parent
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0

POLICY = """
version = "refunds-1"

[[rules]]
id = "refunds-need-finance"
outcome = "require_approval"
approver_role = "finance"
tools = ["issue_refund"]

[[rules]]
id = "the-rest"
outcome = "allow"
tools = ["*"]
"""


def migrate(url: str) -> None:
    out = CliRunner().invoke(cli, ["db", "migrate", "--db", url])
    assert out.exit_code == 0, out.output


def write_config(folder: Path, text: str) -> Path:
    (folder / "policy.toml").write_text(POLICY)
    path = folder / "underway.toml"
    path.write_text(text)
    return path


class Process:
    """A real ``underway`` process, its stderr kept in a file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None):
        self.log = log
        with log.open("wb") as errors:
            self.proc = subprocess.Popen([str(UNDERWAY), *args], cwd=HERE,
                                         env={**os.environ, **(env or {})},
                                         stdout=subprocess.DEVNULL, stderr=errors)

    def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait until ``condition`` holds; fail, with the process's stderr, when the
        deadline passes or the process ends first."""
        deadline = time.monotonic() + PATIENCE_S
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"the process ended before {what}: {self.stderr()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} within {PATIENCE_S} s: {self.stderr()}")
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(0.05)  # ends early if the process fails

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=PATIENCE_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def running(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Process]:
    p = Process(args, log, env)
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    e = Endpoint()
    yield e
    e.close()


@pytest.fixture
def sink() -> Iterator[SmtpSink]:
    s = SmtpSink()
    yield s
    s.close()


def test_the_worker_posts_the_notice_to_the_webhook_the_file_names(
    sqlite_url: str, tmp_path: Path, endpoint: Endpoint,
) -> None:
    migrate(sqlite_url)
    config = write_config(tmp_path, f"""
database = "{sqlite_url}"
[worker]
app = "config_app:app"
poll = 0.1
[policy]
file = "policy.toml"
[notifier.webhook]
url = "{endpoint.url}"
secret_env = "UW_TEST_HOOK_SECRET"
""")
    with Client.connect(sqlite_url) as client, running(
        ["worker", "--config", str(config)], tmp_path / "worker.log",
        env={"UW_TEST_HOOK_SECRET": "hook-s3cret"},
    ) as worker:
        run_id, _ = client.start("refund", None)
        worker.until(lambda: bool(endpoint.received), "notice at the webhook")
        [(headers, body)] = endpoint.received
        assert headers["X-Underway-Signature"] == hmac.new(
            b"hook-s3cret", body, hashlib.sha256).hexdigest()
        notice = json.loads(body)
        assert (notice["kind"], notice["run_id"], notice["tool"], notice["required_role"]) \
            == ("approval", run_id, "issue_refund", "finance")
        assert notice["args"] == {"customer": "c-17", "amount": 1200}
        assert client.state(run_id).status == "waiting"


def test_the_worker_emails_the_notice_through_the_smtp_server_the_file_names(
    sqlite_url: str, tmp_path: Path, sink: SmtpSink,
) -> None:
    migrate(sqlite_url)
    config = write_config(tmp_path, f"""
database = "{sqlite_url}"
[worker]
app = "config_app:app"
poll = 0.1
[policy]
file = "policy.toml"
[notifier.smtp]
host = "127.0.0.1"
port = {sink.port}
sender = "underway@acme.test"
username = "underway"
password_env = "UW_TEST_SMTP_PASSWORD"
[notifier.smtp.recipients]
finance = ["cfo@acme.test"]
"*" = ["audit@acme.test"]
""")
    with Client.connect(sqlite_url) as client, running(
        ["worker", "--config", str(config)], tmp_path / "worker.log",
        env={"UW_TEST_SMTP_PASSWORD": "mail-pw"},
    ) as worker:
        run_id, _ = client.start("refund", None)
        worker.until(lambda: bool(sink.messages), "e-mail at the SMTP server")
        [(sender, rcpts, message)] = sink.messages
        assert (sender, rcpts) == ("underway@acme.test", ["cfo@acme.test", "audit@acme.test"])
        assert sink.logins == [("underway", "mail-pw")]
        assert message["Subject"] == f"[underway] approval needed: issue_refund (run {run_id})"
        assert f"underway approvals approve {run_id}" in message.get_content()


@pytest.mark.postgres
def test_tenant_budgets_and_signed_resolutions_come_from_the_file(
    pg_url: str, tmp_path: Path,
) -> None:
    migrate(pg_url)
    config = write_config(tmp_path, f"""
database = "{pg_url}"
[worker]
app = "config_app:app"
poll = 0.1
[approvals]
signed_resolutions = true
[budgets]
usage_ttl = 0.0
[budgets.default]
messages = 1
[budgets.tenants.vip]
messages = 10
""")
    with Client.connect(pg_url) as client, running(
        ["worker", "--config", str(config)], tmp_path / "worker.log",
    ) as worker:
        acme, _ = client.start("mailer", None, tenant_id="acme")
        vip, _ = client.start("mailer", None, tenant_id="vip")

        def status(run_id: str, tenant: str) -> str:
            return client.state(run_id, tenant_id=tenant).status

        worker.until(lambda: status(acme, "acme") == "escalated", "acme's run escalated")
        worker.until(lambda: status(vip, "vip") == "completed", "vip's run completed")
        assert client.state(acme, tenant_id="acme").messages == 1
        assert client.state(vip, tenant_id="vip").result == 2
        [over] = [r.event for r in client.history(acme, tenant_id="acme")
                  if isinstance(r.event, ev.BudgetExceeded)]
        assert (over.scope, over.metric, over.limit) == ("tenant", "messages", 1.0)

        out = CliRunner().invoke(cli, ["runs", "resolve", acme, "--tenant", "acme",
                                       "--resolution", "succeeded", "--by", "ops",
                                       "--db", pg_url])
        assert out.exit_code == 0, out.output

        def ignored() -> list[ev.SignalIgnored]:
            return [r.event for r in client.history(acme, tenant_id="acme")
                    if isinstance(r.event, ev.SignalIgnored)]

        worker.until(lambda: bool(ignored()), "the unsigned resolve taken up")
        assert "unsigned resolution refused" in ignored()[0].reason
        assert status(acme, "acme") == "escalated"


def test_the_worker_exports_its_spans_to_the_otlp_endpoint_the_file_names(
    sqlite_url: str, tmp_path: Path, endpoint: Endpoint,
) -> None:
    migrate(sqlite_url)
    collector = endpoint.url.removesuffix("/hooks/approvals")
    config = write_config(tmp_path, f"""
database = "{sqlite_url}"
[worker]
app = "config_app:app"
poll = 0.1
[telemetry]
traces = true
exporter = "otlp"
endpoint = "{collector}"
service_name = "config-test-worker"
""")
    with Client.connect(sqlite_url) as client:
        worker = Process(["worker", "--config", str(config)], tmp_path / "worker.log")
        try:
            run_id, _ = client.start("mailer", None)
            worker.until(lambda: client.state(run_id).status == "completed", "run completed")
        finally:
            worker.stop()  # the spans still buffered are sent on the way out
    assert worker.proc.returncode == 0, worker.stderr()
    assert endpoint.paths and set(endpoint.paths) == {"/v1/traces"}
    assert all({k.lower(): v for k, v in h.items()}["content-type"] == "application/x-protobuf"
               for h, _ in endpoint.received)
    sent = b"".join(body for _, body in endpoint.received)
    assert b"config-test-worker" in sent
    # The run's root span and its tool call's span, in the GenAI conventions' name.
    assert b"underway.run mailer" in sent and b"execute_tool send_message" in sent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_listens_where_the_file_says_and_refuses_unsigned_resolutions(
    sqlite_url: str, tmp_path: Path,
) -> None:
    migrate(sqlite_url)
    made = CliRunner().invoke(cli, ["apikeys", "new", "--tenant", "default", "--role",
                                    "operator", "--db", sqlite_url])
    token = made.stdout.strip().splitlines()[-1]
    port = free_port()
    config = write_config(tmp_path, f"""
database = "{sqlite_url}"
[serve]
host = "127.0.0.1"
port = {port}
log_level = "warning"
[approvals]
signed_resolutions = true
""")

    def answers(at: int) -> Callable[[], bool]:
        def check() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{at}/healthz").status_code == 200
            except httpx.TransportError:
                return False
        return check

    with running(["serve", "--config", str(config)], tmp_path / "serve.log") as server:
        server.until(answers(port), f"/healthz on port {port}")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}",
                          headers={"Authorization": f"Bearer {token}"}) as http:
            r = http.post("/v1/runs", json={"flow": "mailer", "input": None},
                          headers={"Idempotency-Key": "k-1"})
            assert r.status_code == 201, r.text
            run_id = r.json()["run_id"]
            refused = http.post(f"/v1/runs/{run_id}/resolve",
                                json={"resolution": "succeeded"})
            assert refused.status_code == 409
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert "unsigned resolution is refused" in refused.json()["detail"]
            assert f"/v1/approvals/{run_id}/decision" in refused.json()["detail"]

    other = free_port()
    with running(["serve", "--config", str(config), "--port", str(other)],
                 tmp_path / "serve-2.log") as server:
        server.until(answers(other), f"/healthz on port {other}, which --port names")
        assert not answers(port)()
