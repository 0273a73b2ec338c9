"""One day at the help desk, end to end, with real worker processes.

1. The desk starts with a backlog: one ticket past its SLA, one close to it. The monitor
   is deployed: help-center articles go into the knowledge base, a support lead's public
   key is registered and the SLA sweep is scheduled.
2. Worker 1 starts and a first sweep runs at once. Five customers open tickets; the relay
   forwards the desk's events to intake, which starts one agent run per ticket. The feed
   is then delivered a second time, as a retrying webhook would, and intake recognises
   every event.
3. The agents work. Worker 1 is killed with SIGKILL at the worst moment: the desk has
   taken the first reply and the worker has not heard back, so the journal holds only the
   reply's intent. Worker 2, a fresh process, takes the runs over and retries that reply
   with the same idempotency key; the desk answers with the reply it already sent.
   Meanwhile the support lead decides what the policy holds for approval (signing each
   decision with their key), and one customer answers the agent's request for details.
4. When every run has finished, worker 2 is stopped and the journals are audited.

:func:`play` does all of this and returns what happened; :mod:`support.report` checks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from underway import Engine, RunState, connect
from underway.client import Recorded
from underway.guard.approvals import (
    generate_keypair,
    load_private_key,
    register_approver,
    sign_decision,
    write_private_key,
)
from underway.knowledge import KnowledgeBase
from underway.scheduling.intake import Routes

from . import helpcenter
from .agent import CUSTOMER_REPLIED
from .app import Settings, build
from .desk import FIXTURE, Desk, DeskServer, Pause
from .relay import Delivery, forward
from .sweep import install_schedule

WORKER = Path(__file__).with_name("worker.py")
TENANT = helpcenter.TENANT
LEAD = "lena"
"""The support lead who decides approvals."""
REPLY_TIMEOUT_S = 6.0
"""How long a ticket waits for missing details in the demo (two days in production)."""
DEADLINE_S = 90.0
READY_TIMEOUT_S = 30.0

Say = Callable[[str], None]


class ScenarioError(Exception):
    """The scenario could not be played to its end; the message says where it stopped."""


@dataclass
class WorkerProcess:
    """A worker subprocess and the file its output goes to."""

    popen: subprocess.Popen[bytes]
    name: str
    log: Path
    began: float
    owner: str = ""

    @classmethod
    def start(cls, name: str, db: str, desk: str, logdir: Path) -> WorkerProcess:
        """Start a worker process (see :meth:`ready` for when it serves)."""
        log = logdir / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("UNDERWAY_CRASH")}
        cmd = [sys.executable, str(WORKER), "--db", db, "--desk", desk,
               "--reply-timeout", str(REPLY_TIMEOUT_S), "--lease-ttl", "10"]
        with log.open("wb") as out:
            popen = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        return cls(popen, name, log, time.monotonic())

    def ready(self) -> bool:
        """Whether the worker said it serves; raises ScenarioError if it died or is late."""
        for line in self.output().splitlines():
            if line.startswith("support worker ") and line.endswith(" ready"):
                self.owner = line.split()[2]
                return True
        if self.popen.poll() is not None or time.monotonic() > self.began + READY_TIMEOUT_S:
            self.kill()
            raise ScenarioError(f"{self.name} did not start:\n{self.output()[-3000:]}")
        return False

    def wait_ready(self) -> None:
        """Block until the worker serves."""
        while not self.ready():
            time.sleep(0.02)

    def output(self) -> str:
        """What the worker printed."""
        return self.log.read_text(errors="replace")

    def kill(self) -> int:
        """SIGKILL the worker; its exit status (negative: the signal)."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        return self.popen.wait()

    def stop(self) -> int:
        """SIGTERM the worker and wait for it to finish the steps in flight."""
        self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return self.kill()


@dataclass
class Decision:
    """What the support lead decided on a held call."""

    ticket_id: str
    tool: str
    verdict: str
    comment: str
    body: str


@dataclass
class Outcome:
    """Everything the scenario did and found, for the report and its checks."""

    db: str
    data: Path
    tickets: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Ticket id -> the fixture entry the customer opened it from."""
    runs: dict[str, str] = field(default_factory=dict)
    """Ticket id -> the agent run intake started for it."""
    sweep_run: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    redeliveries: list[Delivery] = field(default_factory=list)
    killed_status: int | None = None
    held_reply: dict[str, Any] | None = None
    """The reply the desk had taken when worker 1 was killed."""
    intent_only: bool = False
    """At the kill, the journal held that reply's intent and no outcome."""
    decisions: list[Decision] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    """Tickets whose customer answered the request for details."""
    desk: dict[str, Any] = field(default_factory=dict)
    states: dict[str, RunState] = field(default_factory=dict)
    histories: dict[str, list[Recorded]] = field(default_factory=dict)
    audit: dict[str, str | None] = field(default_factory=dict)
    """Run id -> None when its hash chain verifies, else why not."""
    schedule_next: float | None = None
    elapsed_s: float = 0.0


def play(data: Path, db: str, *, say: Say = print) -> Outcome:
    """Play the scenario in ``data`` (the desk's file, worker logs, the lead's key) on the
    journal at ``db``; return what happened."""
    began = time.monotonic()
    data.mkdir(parents=True, exist_ok=True)
    out = Outcome(db=db, data=data)
    desk = Desk.create(data)
    server = DeskServer(desk)
    workers: list[WorkerProcess] = []
    store = connect(db)
    monitor = build(Settings(desk=server.url, reply_timeout_s=REPLY_TIMEOUT_S), store)
    try:
        with server:
            engine = monitor.engine(store)
            _deploy(engine, monitor.knowledge, data, say)
            out.schedule_next = install_schedule(engine, monitor.sweep).next_fire_at

            say("\n[2] worker 1 starts; the first SLA sweep runs; five customers write in")
            held = desk.pause_next("reply")
            workers.append(WorkerProcess.start("worker-1", db, server.url, data))
            workers[0].wait_ready()
            out.sweep_run, _ = engine.start(monitor.sweep, {}, tenant_id=TENANT,
                                            idempotency_key="sla-sweep:deployment")
            incoming = json.loads(FIXTURE.read_text(encoding="utf-8"))["incoming"]
            for entry in incoming:
                t = desk.open_ticket(entry["customer"], entry["subject"], entry["body"],
                                     entry["priority"], entry["sla_s"])
                out.tickets[t["id"]] = entry
            out.deliveries = forward(engine.client, server.url, monitor.routes)
            for d in out.deliveries:
                say(f"    {d.type} {d.ticket_id}: intake {d.result.action} run "
                    f"{d.result.run_id}")
                if d.result.action == "started" and d.result.run_id:
                    out.runs[d.ticket_id] = d.result.run_id
            out.redeliveries = forward(engine.client, server.url, monitor.routes)
            say(f"    the same {len(out.redeliveries)} events delivered again: "
                + ", ".join(sorted({d.result.action for d in out.redeliveries})))

            say("\n[3] the agents work; the support lead and the customers answer when asked")
            _drive(engine, desk, server.url, monitor.routes, held, workers, data, out, say)
            say("\n[4] every run finished; worker 2 stops")
            workers[-1].stop()
            _collect(engine, desk, out)
    finally:
        for w in workers:
            if w.popen.poll() is None:
                w.kill()
        monitor.knowledge.close()
        store.close()
    out.elapsed_s = time.monotonic() - began
    return out


def _deploy(engine: Engine, knowledge: KnowledgeBase, data: Path, say: Say) -> None:
    say("[1] the monitor is deployed")
    now = engine.clock.now()
    n = helpcenter.seed(knowledge, now=now)
    pem, public = generate_keypair()
    write_private_key(data / f"{LEAD}.pem", pem)
    register_approver(engine.store, LEAD, public_key=public, roles=["support_lead"], now=now,
                      tenant_id=TENANT)
    say(f"    {n} help-center articles in the knowledge base; approver {LEAD!r} "
        "(support_lead) registered")


def _drive(engine: Engine, desk: Desk, url: str, routes: Routes, held: Pause,
           workers: list[WorkerProcess], data: Path, out: Outcome, say: Say) -> None:
    """Kill worker 1 at the held reply, start worker 2, and answer for the lead and the
    customers until every run has finished."""
    key = load_private_key(data / f"{LEAD}.pem")
    decided: set[str] = set()
    cursor = max(d.seq for d in out.deliveries)
    runs = [*out.runs.values(), out.sweep_run]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        if out.killed_status is None and held.arrived.is_set():
            if held.held is None:
                raise ScenarioError("the desk announced a held reply but recorded none")
            out.held_reply = held.held
            out.killed_status = workers[0].kill()
            held.release()
            out.intent_only = _intent_only(engine, out.runs[out.held_reply["ticket_id"]],
                                           out.held_reply["key"])
            journal = ("the journal holds only its intent" if out.intent_only
                       else "yet the journal does not hold its bare intent")
            say(f"    worker 1 killed (SIGKILL, exit {out.killed_status}): the desk took the "
                f"reply to {out.held_reply['ticket_id']}, {journal}")
            workers.append(WorkerProcess.start("worker-2", out.db, url, data))
        if len(workers) == 2 and not workers[1].owner and workers[1].ready():
            say(f"    worker 2 ({workers[1].owner}), a fresh process, takes the runs over")
        states = {r: engine.state(r, tenant_id=TENANT) for r in runs}
        for ticket_id, run_id in out.runs.items():
            s = states[run_id]
            pending = s.pending_approval
            if s.status == "waiting" and pending and pending.request_id not in decided:
                decided.add(str(pending.request_id))
                out.decisions.append(_review(engine, key, s, ticket_id, say))
            waits = s.status == "waiting" and s.waiting_signal == CUSTOMER_REPLIED
            answer = out.tickets[ticket_id].get("replies_when_asked")
            if waits and answer and ticket_id not in out.answered:
                desk.customer_reply(ticket_id, answer)
                out.answered.append(ticket_id)
                for d in forward(engine.client, url, routes, after=cursor):
                    cursor = max(cursor, d.seq)
                    say(f"    customer of {ticket_id} answers; {d.type}: intake "
                        f"{d.result.action} run {d.result.run_id}")
        stuck = [f"{r} is {s.status}: {s.escalation.reason if s.escalation else s.error}"
                 for r, s in states.items() if s.status in ("escalated", "dead")]
        if stuck:
            raise ScenarioError("a run needs an operator: " + "; ".join(stuck))
        if out.killed_status is not None and all(s.final for s in states.values()):
            return
        if time.monotonic() > deadline:
            waiting = {r: s.status for r, s in states.items() if not s.final}
            raise ScenarioError(f"runs unfinished after {DEADLINE_S:g}s: {waiting}"
                                + ("" if out.killed_status is not None
                                   else "; no reply reached the desk"))
        time.sleep(0.05)


def _intent_only(engine: Engine, run_id: str, key: str) -> bool:
    """Whether the run's journal holds the call ``key``'s intent (``ToolStarted``) and no
    outcome."""
    history = engine.client.history(run_id, tenant_id=TENANT)
    keys = [(type(r.event).__name__, getattr(r.event, "key", None)) for r in history]
    return ("ToolStarted", key) in keys and ("ToolSucceeded", key) not in keys


def _review(engine: Engine, key: Ed25519PrivateKey, s: RunState, ticket_id: str,
            say: Say) -> Decision:
    """The support lead reads a held call and signs a decision: a reply that repeats the
    customer's own words (the request's evidence names ``read_ticket`` among what its
    arguments repeat) is refused, anything else approved."""
    pending = s.pending_approval
    assert pending is not None
    args = pending.args
    body = str(args.get("body", "")) if isinstance(args, dict) else ""
    evidence = pending.evidence
    repeats = evidence.get("repeats") if isinstance(evidence, dict) else None
    parrots = isinstance(repeats, list) and "read_ticket" in repeats
    verdict: Literal["approve", "reject"] = "reject" if parrots else "approve"
    comment = ("the reply repeats the customer's own words and promises a refund; refunds "
               "go through billing" if parrots else "reply checked")
    decision = sign_decision(
        key, request_id=str(pending.request_id), run_id=s.run_id, tenant_id=s.tenant_id,
        tool=str(pending.tool), args_hash=str(pending.args_hash), decision=verdict,
        expires_at=float(str(pending.expires_at)), approver_id=LEAD, comment=comment,
    )
    engine.client.submit_decision(decision.model_dump(mode="json"), tenant_id=s.tenant_id)
    say(f"    {LEAD} {verdict}s {pending.tool} on {ticket_id} (rule "
        f"{pending.rule_id}): {' '.join(body.split())[:60]!r}")
    return Decision(ticket_id, str(pending.tool), verdict, comment, body)


def _collect(engine: Engine, desk: Desk, out: Outcome) -> None:
    out.desk = desk.snapshot()
    for run_id in [*out.runs.values(), out.sweep_run]:
        out.states[run_id] = engine.state(run_id, tenant_id=TENANT)
        out.histories[run_id] = engine.client.history(run_id, tenant_id=TENANT)
        v = engine.client.verify(run_id, tenant_id=TENANT)
        out.audit[run_id] = None if v.ok else f"seq {v.bad_seq}: {v.reason}"
