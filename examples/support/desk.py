"""The simulated ticket desk: a small JSON-over-HTTP service with its state in one file.

Customers open tickets and answer questions (``POST /tickets``, ``POST
/tickets/{id}/customer-replies``); each such change is also written to an event feed
(``GET /events?after=N``) that the monitor forwards to underway's intake, the way a real
help desk calls a webhook. The agent's side of the API reads tickets and acts on them:

==========================================  ============================================
``GET  /tickets``                           open tickets (desk-owned fields only)
``GET  /tickets/{id}``                      one ticket, with what the customer wrote
``POST /tickets/{id}/drafts``               store a reply draft
``POST /tickets/{id}/replies``              send a reply to the customer
``POST /tickets/{id}/details-requests``     ask the customer for missing details
``POST /tickets/{id}/escalations``          hand the ticket to a human queue
``POST /tickets/{id}/close``                close a resolved ticket
==========================================  ============================================

Every agent-side ``POST`` must carry an ``Idempotency-Key``: the desk performs the change
once per key and answers a repeated key with the first answer, counting the attempts, so
a caller that retries after a crash never sends a reply twice. The desk also checks what a
caller asserts about a ticket (its priority when replying, its status when closing), so an
agent cannot talk its way past a policy that decides on those arguments.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FIXTURE = Path(__file__).with_name("tickets.json")
STATE_FILE = "desk.json"
CLOSED = ("resolved", "closed")
"""Statuses of tickets nobody needs to work on."""
HUMAN_QUEUE = "tier2"

Ticket = dict[str, Any]


class DeskError(Exception):
    """A request the desk refuses; ``status`` is the HTTP status it answers with."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Pause:
    """Holds the desk's answer to one request after the change is saved, until released:
    the moment at which a caller that dies has done the effect without hearing of it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.arrived = threading.Event()
        self.held: dict[str, Any] | None = None
        """What the held request did (its saved change), set before :attr:`arrived`."""
        self._release = threading.Event()

    def hold(self) -> None:
        """Called by the request's thread: announce the request, wait for release."""
        self.arrived.set()
        self._release.wait(timeout=120)

    def release(self) -> None:
        """Let the held answer go (to a caller that may no longer listen)."""
        self._release.set()


class Desk:
    """The desk's state and operations; thread-safe, every change saved before it returns."""

    def __init__(self, data: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = data / STATE_FILE
        self.clock = clock
        self._lock = threading.Lock()
        self._pauses: list[Pause] = []
        self._state: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))

    @classmethod
    def create(cls, data: Path, *, fixture: Path = FIXTURE,
               clock: Callable[[], float] = time.time) -> Desk:
        """A desk in ``data`` holding the fixture's backlog (tickets older than the monitor)."""
        data.mkdir(parents=True, exist_ok=True)
        now = clock()
        backlog = json.loads(fixture.read_text(encoding="utf-8"))["backlog"]
        state = {
            "tickets": {
                t["id"]: _ticket(t["id"], t["customer"], t["subject"], t["body"], t["priority"],
                                 created_at=now - t["age_s"], sla_s=t["sla_s"])
                for t in backlog
            },
            "next_id": 101, "events": [], "responses": {}, "attempts": {}, "outbox": [],
            "queue": [],
        }
        _save(data / STATE_FILE, state)
        return cls(data, clock=clock)

    # -- the customer's side ------------------------------------------------------------
    def open_ticket(self, customer: str, subject: str, body: str, priority: str,
                    sla_s: float) -> Ticket:
        """A customer opens a ticket; the feed gets ``ticket.created``."""
        if priority not in ("low", "normal", "high"):
            raise DeskError(HTTPStatus.BAD_REQUEST, f"unknown priority {priority!r}")
        with self._lock:
            s = self._state
            ticket_id = f"T-{s['next_id']}"
            s["next_id"] += 1
            now = self.clock()
            t = s["tickets"][ticket_id] = _ticket(ticket_id, customer, subject, body, priority,
                                                 created_at=now, sla_s=sla_s)
            self._event("ticket.created", t, {})
            self._save()
            return dict(t)

    def customer_reply(self, ticket_id: str, body: str) -> Ticket:
        """The customer answers on a ticket; the feed gets ``ticket.customer_replied``."""
        with self._lock:
            t = self._get(ticket_id)
            t["messages"].append({"from": "customer", "body": body, "at": self.clock()})
            if t["status"] == "waiting_on_customer":
                t["status"] = "open"
            self._event("ticket.customer_replied", t, {"message": len(t["messages"]) - 1})
            self._save()
            return dict(t)

    # -- the agent's side ---------------------------------------------------------------
    def open_tickets(self) -> list[dict[str, Any]]:
        """Tickets not resolved or closed, oldest first, with the fields the desk owns."""
        with self._lock:
            return [_summary(t) for t in self._state["tickets"].values()
                    if t["status"] not in CLOSED]

    def ticket(self, ticket_id: str) -> Ticket:
        """One ticket, everything in it."""
        with self._lock:
            copy: Ticket = json.loads(json.dumps(self._get(ticket_id)))
        return copy

    def draft(self, key: str, ticket_id: str, body: str) -> dict[str, Any]:
        """Store a reply draft on the ticket."""
        def act(t: Ticket) -> dict[str, Any]:
            t["drafts"].append({"key": key, "body": body, "at": self.clock()})
            return {"ticket_id": t["id"], "draft": len(t["drafts"])}
        return self._once(key, ticket_id, act)

    def reply(self, key: str, ticket_id: str, body: str, priority: str) -> dict[str, Any]:
        """Send a reply to the customer (once per key)."""
        def act(t: Ticket) -> dict[str, Any]:
            if priority != t["priority"]:
                raise DeskError(HTTPStatus.CONFLICT,
                                f"{t['id']} has priority {t['priority']!r}, not {priority!r}")
            if t["status"] in CLOSED:
                raise DeskError(HTTPStatus.CONFLICT, f"{t['id']} is {t['status']}")
            now = self.clock()
            self._to_customer(t, "reply", body, now)
            t["status"] = "answered"
            self._state["outbox"].append({"key": key, "ticket_id": t["id"], "body": body,
                                          "at": now})
            return {"ticket_id": t["id"], "status": t["status"],
                    "message_id": f"msg-{len(self._state['outbox'])}"}
        return self._once(key, ticket_id, act, pause="reply")

    def request_details(self, key: str, ticket_id: str, message: str) -> dict[str, Any]:
        """Ask the customer for what is missing; the ticket waits on the customer."""
        def act(t: Ticket) -> dict[str, Any]:
            self._to_customer(t, "details_request", message, self.clock())
            t["status"] = "waiting_on_customer"
            return {"ticket_id": t["id"], "status": t["status"]}
        return self._once(key, ticket_id, act)

    def escalate(self, key: str, ticket_id: str, reason: str) -> dict[str, Any]:
        """Hand the ticket to the human queue (a ticket already there stays put)."""
        def act(t: Ticket) -> dict[str, Any]:
            if t["escalation"] is None:
                t["escalation"] = {"queue": HUMAN_QUEUE, "reason": reason, "at": self.clock()}
                self._state["queue"].append(t["id"])
            t["status"] = "escalated"
            return {"ticket_id": t["id"], "status": t["status"], "queue": HUMAN_QUEUE,
                    "position": self._state["queue"].index(t["id"]) + 1}
        return self._once(key, ticket_id, act)

    def close(self, key: str, ticket_id: str, status: str) -> dict[str, Any]:
        """Close a resolved ticket; ``status`` is what the caller believes it is."""
        def act(t: Ticket) -> dict[str, Any]:
            if status != t["status"]:
                raise DeskError(HTTPStatus.CONFLICT,
                                f"{t['id']} is {t['status']!r}, not {status!r}")
            if t["status"] != "resolved":
                raise DeskError(HTTPStatus.CONFLICT,
                                f"{t['id']} is {t['status']!r}; only resolved tickets close")
            t["status"] = "closed"
            return {"ticket_id": t["id"], "status": "closed"}
        return self._once(key, ticket_id, act)

    def events(self, after: int = 0) -> list[dict[str, Any]]:
        """Feed events with a sequence number above ``after``, in order."""
        with self._lock:
            return [e for e in self._state["events"] if e["seq"] > after]

    def snapshot(self) -> dict[str, Any]:
        """A deep copy of the whole state (for reports and checks)."""
        with self._lock:
            copy: dict[str, Any] = json.loads(json.dumps(self._state))
        return copy

    def pause_next(self, kind: str) -> Pause:
        """Hold the answer to the next ``kind`` request (``"reply"``) once it is saved."""
        pause = Pause(kind)
        with self._lock:
            self._pauses.append(pause)
        return pause

    # -- internals ----------------------------------------------------------------------
    def _once(self, key: str, ticket_id: str, act: Callable[[Ticket], dict[str, Any]],
              *, pause: str = "") -> dict[str, Any]:
        """Do ``act`` once per ``key``; the first request of kind ``pause`` that changes
        something is held after the change is saved (the pause is claimed under the same
        lock as the change, so it holds exactly the request it says it holds)."""
        if not key:
            raise DeskError(HTTPStatus.BAD_REQUEST, "an Idempotency-Key header is required")
        held: Pause | None = None
        with self._lock:
            s = self._state
            s["attempts"][key] = s["attempts"].get(key, 0) + 1
            done = s["responses"].get(key)
            if done is None:
                done = s["responses"][key] = act(self._get(ticket_id))
                held = next((p for p in self._pauses if p.kind == pause), None)
                if held is not None:
                    self._pauses.remove(held)
                    held.held = {"key": key, "ticket_id": ticket_id, **done}
            self._save()
        if held is not None:
            held.hold()
        return dict(done)

    def _get(self, ticket_id: str) -> Ticket:
        t: Ticket | None = self._state["tickets"].get(ticket_id)
        if t is None:
            raise DeskError(HTTPStatus.NOT_FOUND, f"no ticket {ticket_id!r}")
        return t

    def _to_customer(self, t: Ticket, kind: str, body: str, now: float) -> None:
        t["messages"].append({"from": "agent", "kind": kind, "body": body, "at": now})
        if t["first_response_at"] is None:
            t["first_response_at"] = now

    def _event(self, kind: str, t: Ticket, extra: dict[str, Any]) -> None:
        events = self._state["events"]
        events.append({"seq": len(events) + 1, "type": kind, "ticket": _summary(t),
                       "at": self.clock(), **extra})

    def _save(self) -> None:
        _save(self.path, self._state)


def _ticket(ticket_id: str, customer: str, subject: str, body: str, priority: str, *,
            created_at: float, sla_s: float) -> Ticket:
    return {
        "id": ticket_id, "customer": customer, "subject": subject, "body": body,
        "priority": priority, "created_at": created_at, "sla_due": created_at + sla_s,
        "status": "open", "first_response_at": None, "messages": [], "drafts": [],
        "escalation": None,
    }


def _summary(t: Ticket) -> dict[str, Any]:
    keys = ("id", "customer", "priority", "created_at", "sla_due", "status",
            "first_response_at")
    return {k: t[k] for k in keys}


def _save(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically: a crash leaves the old or the new state."""
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(state, f, ensure_ascii=False, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- HTTP ----------------------------------------------------------------------------------
_TICKET = re.compile(r"^/tickets/(?P<id>T-\d+)(?:/(?P<action>[a-z-]+))?$")


class _Handler(BaseHTTPRequestHandler):
    desk: Desk

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the demo prints what matters itself."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        m = _TICKET.match(url.path)
        if url.path == "/tickets":
            self._answer(lambda: {"tickets": self.desk.open_tickets()})
        elif url.path == "/events":
            after = int(parse_qs(url.query).get("after", ["0"])[0])
            self._answer(lambda: {"events": self.desk.events(after)})
        elif m and m["action"] is None:
            self._answer(lambda: self.desk.ticket(m["id"]))
        else:
            self._fail(HTTPStatus.NOT_FOUND, f"no route GET {url.path}")

    def do_POST(self) -> None:
        try:
            body = self._body()
        except DeskError as exc:
            self._fail(exc.status, exc.message)
            return
        key = self.headers.get("Idempotency-Key", "")
        path = urlsplit(self.path).path
        m = _TICKET.match(path)
        d = self.desk
        routes: dict[str | None, Callable[[str], dict[str, Any]]] = {
            "customer-replies": lambda i: d.customer_reply(i, _text(body, "body")),
            "drafts": lambda i: d.draft(key, i, _text(body, "body")),
            "replies": lambda i: d.reply(key, i, _text(body, "body"), _text(body, "priority")),
            "details-requests": lambda i: d.request_details(key, i, _text(body, "message")),
            "escalations": lambda i: d.escalate(key, i, _text(body, "reason")),
            "close": lambda i: d.close(key, i, _text(body, "status")),
        }
        if path == "/tickets":
            self._answer(lambda: d.open_ticket(
                _text(body, "customer"), _text(body, "subject"), _text(body, "body"),
                _text(body, "priority"), float(body.get("sla_s", 14400))))
        elif m and m["action"] in routes:
            ticket_id = m["id"]
            self._answer(lambda: routes[m["action"]](ticket_id))
        else:
            self._fail(HTTPStatus.NOT_FOUND, f"no route POST {path}")

    def _body(self) -> dict[str, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            raise DeskError(HTTPStatus.BAD_REQUEST, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise DeskError(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
        return body

    def _answer(self, produce: Callable[[], Any]) -> None:
        try:
            result = produce()
        except DeskError as exc:
            self._fail(exc.status, exc.message)
            return
        self._send(HTTPStatus.OK, result)

    def _fail(self, status: HTTPStatus, message: str) -> None:
        self._send(status, {"error": message})

    def _send(self, status: HTTPStatus, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller died waiting (the demo kills workers); the change is saved


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value.strip():
        raise DeskError(HTTPStatus.BAD_REQUEST, f"field {field!r} must be a non-empty string")
    return value


class DeskServer:
    """Serves a :class:`Desk` on 127.0.0.1 (a free port) from a background thread."""

    def __init__(self, desk: Desk) -> None:
        handler = type("DeskHandler", (_Handler,), {"desk": desk})
        self.desk = desk
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="support-desk")

    @property
    def url(self) -> str:
        """Where the desk listens."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> DeskServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
