"""The collections story, step by step: what ``demo.py`` narrates and the tests check.

1. :meth:`Scenario.start_services` — the simulated ERP, payments, gateway and finance;
2. :meth:`Scenario.take_in` — overdue-invoice events through intake, one delivered twice;
3. :meth:`Scenario.crash_worker` — a real ``underway worker`` that SIGKILLs itself right
   after the gateway accepted a reminder, before the journal recorded it;
4. :meth:`Scenario.resume` — a replacement worker retries that send with the same key;
   the gateway recognises it, so the customer gets one message;
5. :meth:`Scenario.approve` — the write-off held by the policy is approved with the real
   CLI: ``approvals ls/show``, ``keys new``, ``approvers add``, ``approvals approve``;
6. :meth:`Scenario.finish` — every run settles; the findings come from the journal and the
   services' records.
"""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from underway import Client
from underway import events as ev
from underway.crypto import KeyringFile, encrypt
from underway.errors import UnderwayError
from underway.scheduling.intake import IntakeEvent, IntakeResult

from . import ops, overdue, playbook
from .app import flows
from .report import Findings, collect
from .services import Running, Systems, serve

APPROVER = "priya"
APPROVER_ROLE = "finance"


class ScenarioError(UnderwayError):
    """The story did not unfold as it must (the kill missed its point, a worker misbehaved)."""


@dataclass(frozen=True)
class Crash:
    """Where the first worker died: the reminder sent but not journaled."""

    exit_status: int
    run_id: str
    intent: ev.ToolStarted
    invoice_id: str
    message_id: str


@dataclass(frozen=True)
class Resumption:
    """How the replacement worker settled the crashed send."""

    outcome: ev.Event
    """The journaled outcome of the send (``ToolSucceeded`` when all went well)."""
    requests: int
    """Send requests the gateway received for the key."""
    deliveries: int
    """Messages it delivered for the key."""


@dataclass(frozen=True)
class Command:
    """One ``underway`` command as shown to the reader, and its output."""

    shown: str
    output: str


class Scenario:
    """The collections example in ``data``, journaled in ``db``."""

    def __init__(self, data: Path, db: str, *, day_seconds: float,
                 keyring: Path | None = None) -> None:
        self.data = data
        self.db = db
        self.day_seconds = day_seconds
        self.keyring = keyring
        """The keyring file the journal is encrypted with (None: not encrypted)."""
        self.systems: Systems | None = None
        self.services: Running | None = None
        self.client: Client | None = None
        self.workers: list[subprocess.Popen[bytes]] = []

    def _systems(self) -> Systems:
        if self.systems is None:
            raise ScenarioError("start the services first (start_services)")
        return self.systems

    def _client(self) -> Client:
        if self.client is None:
            self.client = Client.connect(self.db)
            if self.keyring is not None:
                encrypt(self.client.store, KeyringFile(self.keyring))
        return self.client

    def close(self) -> None:
        """Stop every worker and service this scenario started."""
        for proc in self.workers:
            ops.stop_worker(proc)
        if self.services is not None:
            self.services.close()
        if self.systems is not None:
            self.systems.close()
        if self.client is not None:
            self.client.close()

    # -- 1 --------------------------------------------------------------------------------
    def start_services(self) -> dict[str, str]:
        """Start the simulated services and write the playbook; return the services' URLs."""
        self.systems = Systems.create(self.data)
        self.services = serve(self.systems, self.data)
        playbook.seed(self.data)
        return self.services.urls

    def invoices(self) -> list[dict[str, Any]]:
        """The invoices as the ERP shows them now."""
        systems = self._systems()
        return [systems.invoice(i) for i in systems.invoice_ids()]

    # -- 2 --------------------------------------------------------------------------------
    def take_in(self) -> list[tuple[IntakeEvent, IntakeResult]]:
        """Deliver tonight's overdue-invoice events (one of them twice)."""
        # A client given the flows checks each event's input before anything is stored.
        client = Client(self._client().store, flows=flows(self.data))
        events = overdue.deliveries(self._systems())
        return list(zip(events, overdue.deliver(client, events), strict=True))

    # -- 3 --------------------------------------------------------------------------------
    def crash_worker(self, *, timeout: float = 90.0) -> Crash:
        """Run a worker that dies by SIGKILL right after its first reminder went out.

        With one run at a time, a run's first three tool calls are the invoice lookup, the
        payment check and the first reminder, so the third call's end is the kill point.
        """
        proc = ops.start_worker(self.db, self.data, day_seconds=self.day_seconds,
                                log=self.data / "worker-1.log", concurrency=1,
                                crash_after_effects=3, keyring=self.keyring)
        self.workers.append(proc)
        try:
            status = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"worker 1 was still alive after {timeout:g}s; see "
                               f"{self.data / 'worker-1.log'}") from None
        if status != -signal.SIGKILL:
            raise ScenarioError(f"worker 1 exited with status {status}, not by SIGKILL; see "
                               f"{self.data / 'worker-1.log'}")
        pending = ops.unfinished_call(self._client(), "send_reminder")
        if pending is None:
            raise ScenarioError(
                "worker 1 died after its third tool call, but that call was not a reminder "
                "(the kill point is tuned to the built-in brain; a real model may order its "
                "calls differently)"
            )
        run_id, intent = pending
        sent = [m for m in self._systems().messages() if m["key"] == intent.key]
        if not sent:
            raise ScenarioError(f"worker 1 died before the gateway accepted {intent.key}")
        return Crash(status, run_id, intent, sent[0]["invoice_id"], sent[0]["message_id"])

    # -- 4 --------------------------------------------------------------------------------
    def resume(self, crash: Crash, *, timeout: float = 90.0) -> Resumption:
        """Start the replacement worker and wait until it settled the crashed send."""
        self.workers.append(ops.start_worker(self.db, self.data, day_seconds=self.day_seconds,
                                             log=self.data / "worker-2.log",
                                             keyring=self.keyring))
        settled = ops.wait_for(
            lambda: ops.outcome(self._client(), crash.run_id, crash.intent.key),
            what=f"the outcome of {crash.intent.key}", timeout=timeout,
        )
        systems = self._systems()
        return Resumption(
            outcome=settled,
            requests=systems.message_requests().count(crash.intent.key),
            deliveries=sum(1 for m in systems.messages() if m["key"] == crash.intent.key),
        )

    # -- 5 --------------------------------------------------------------------------------
    def held_for_approval(self, *, timeout: float = 90.0) -> str:
        """Wait until a run waits for an approval; return its id."""
        return ops.wait_for(
            lambda: next((s.run_id for s in ops.states(self._client())
                          if s.status == "waiting" and s.pending_approval is not None), None),
            what="a run to wait for an approval", timeout=timeout,
        )

    def approve(self, run_id: str) -> list[Command]:
        """Review and approve ``run_id``'s held call with the real ``underway`` CLI."""
        key = self.data / f"{APPROVER}.pem"
        done = [
            Command("underway approvals ls",
                    ops.cli("approvals", "ls", db=self.db, keyring=self.keyring).stdout),
            Command(f"underway approvals show {run_id}",
                    ops.cli("approvals", "show", run_id, db=self.db,
                            keyring=self.keyring).stdout),
        ]
        made = ops.cli("keys", "new", "--out", str(key), "--approver", APPROVER).stdout
        done.append(Command(f"underway keys new --out {key.name} --approver {APPROVER}", made))
        public = next(line.split(":", 1)[1].strip() for line in made.splitlines()
                      if line.startswith("public key:"))
        done.append(Command(
            f"underway approvers add {APPROVER} --public-key {public} --role {APPROVER_ROLE}",
            ops.cli("approvers", "add", APPROVER, "--public-key", public, "--role",
                    APPROVER_ROLE, db=self.db, keyring=self.keyring).stdout,
        ))
        comment = "checked return note RN-88 with the warehouse"
        done.append(Command(
            f"underway approvals approve {run_id} --key {key.name} --as {APPROVER} "
            f"--comment {comment!r}",
            ops.cli("approvals", "approve", run_id, "--key", str(key), "--as", APPROVER,
                    "--comment", comment, db=self.db, keyring=self.keyring).stdout,
        ))
        return done

    # -- 6 --------------------------------------------------------------------------------
    def finish(self, *, timeout: float = 120.0) -> Findings:
        """Wait until every run settled, stop the workers, and collect the findings."""
        ops.wait_for(
            lambda: True if all(s.status in ops.SETTLED for s in ops.states(self._client()))
            else None,
            what="every run to settle", timeout=timeout, poll=0.2,
        )
        for proc in self.workers:
            ops.stop_worker(proc)
        return collect(self._client(), self._systems())
