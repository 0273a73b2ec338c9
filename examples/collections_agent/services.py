"""The outside world of the example: four small HTTP services sharing one SQLite file.

* **ERP** — ``GET /invoices/{id}``: an invoice with its balance and, once the customer has
  had enough reminders, the dispute they raised; ``POST /tickets``: hand an invoice to a
  human team (disputes, collections), once per ``Idempotency-Key``.
* **payments** — ``GET /payments/{invoice_id}``: paid or not. An invoice is paid after a
  set number of reminders reached the customer, or once its disputed part was written off.
* **messaging gateway** — ``POST /messages``: delivers a message once per
  ``Idempotency-Key``, like a real provider. Every request is logged too, so a send that
  was retried after a crash shows up as a second request for a key delivered once.
* **finance** — ``POST /refunds`` and ``POST /write-offs`` move money once per key;
  ``GET /records/{key}`` says whether a key moved money (what a reconcile hook asks).

Everything the services know lives in ``systems.db`` in the data directory, so it
survives any worker being killed, and a test reads the same records the tools wrote.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).with_name("invoices.json")
SERVICES_FILE = "services.json"
"""Where, in the data directory, the running services write their URLs."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS invoices (id TEXT PRIMARY KEY, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    key TEXT PRIMARY KEY, message_id TEXT NOT NULL, invoice_id TEXT NOT NULL,
    recipient TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS message_requests (
    n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tickets (
    key TEXT PRIMARY KEY, ticket_id TEXT NOT NULL, invoice_id TEXT NOT NULL,
    team TEXT NOT NULL, summary TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS money (
    key TEXT PRIMARY KEY, record_id TEXT NOT NULL, kind TEXT NOT NULL,
    invoice_id TEXT NOT NULL, amount TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL);
"""


class ServiceError(Exception):
    """A request the service refuses; becomes an HTTP error answer with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _money(value: Any, what: str) -> Decimal:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ServiceError(400, f"{what} must be a number, not {value!r}") from None
    if not amount.is_finite() or amount <= 0:
        raise ServiceError(400, f"{what} must be a positive amount, not {value!r}")
    return amount.quantize(Decimal("0.01"))


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ServiceError(400, f"field {field!r} must be a non-empty string")
    return value


class Systems:
    """The state of the simulated services, in ``<data>/systems.db``.

    Safe to share between the services' request threads; open it again (``Systems(data)``)
    from any process to read what the services recorded.
    """

    def __init__(self, data: Path) -> None:
        self.path = data / "systems.db"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    @classmethod
    def create(cls, data: Path, fixture: Path = FIXTURE) -> Systems:
        """The services' state in ``data``, with the invoices of ``fixture`` loaded."""
        data.mkdir(parents=True, exist_ok=True)
        systems = cls(data)
        book = json.loads(fixture.read_text(encoding="utf-8"))
        with systems._tx() as db:
            for inv in book["invoices"]:
                db.execute("INSERT OR IGNORE INTO invoices (id, doc) VALUES (?, ?)",
                           (inv["id"], json.dumps(inv)))
        return systems

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _rows(self, sql: str, *args: Any) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]

    # -- ERP -----------------------------------------------------------------------------
    def invoice_ids(self) -> list[str]:
        """Every invoice id, in order."""
        return [r["id"] for r in self._rows("SELECT id FROM invoices ORDER BY id")]

    def _fixture(self, invoice_id: str) -> dict[str, Any]:
        rows = self._rows("SELECT doc FROM invoices WHERE id = ?", invoice_id)
        if not rows:
            raise ServiceError(404, f"no invoice {invoice_id!r}")
        doc: dict[str, Any] = json.loads(rows[0]["doc"])
        return doc

    def _reminded(self, invoice_id: str) -> int:
        return len(self._rows("SELECT key FROM messages WHERE invoice_id = ?", invoice_id))

    def _written_off(self, invoice_id: str) -> Decimal:
        rows = self._rows("SELECT amount FROM money WHERE invoice_id = ? AND kind = 'write_off'",
                          invoice_id)
        return sum((Decimal(r["amount"]) for r in rows), Decimal("0.00"))

    def invoice(self, invoice_id: str) -> dict[str, Any]:
        """The invoice as the ERP shows it now."""
        doc = self._fixture(invoice_id)
        written_off = self._written_off(invoice_id)
        dispute = doc.get("dispute")
        raised = dispute is not None and self._reminded(invoice_id) >= dispute["after_reminders"]
        return {
            "id": doc["id"], "customer": doc["customer"], "contact": doc["contact"],
            "amount": doc["amount"], "currency": doc["currency"], "issued": doc["issued"],
            "due": doc["due"], "written_off": str(written_off),
            "balance": str(Decimal(doc["amount"]) - written_off),
            "status": "paid" if self.payment(invoice_id)["paid"] else "open",
            "dispute": {k: dispute[k] for k in ("amount", "reason", "reference")}
            if raised and dispute is not None else None,
        }

    def open_ticket(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """Hand an invoice to a human team, once per key."""
        invoice_id = _text(body, "invoice_id")
        self._fixture(invoice_id)
        team, summary = _text(body, "team"), _text(body, "summary")
        with self._tx() as db:
            found = db.execute("SELECT * FROM tickets WHERE key = ?", (key,)).fetchone()
            if found is None:
                n = db.execute("SELECT COUNT(*) FROM tickets").fetchone()[0]
                ticket = {"key": key, "ticket_id": f"T-{501 + n}", "invoice_id": invoice_id,
                          "team": team, "summary": summary, "at": time.time()}
                db.execute("INSERT INTO tickets VALUES (:key, :ticket_id, :invoice_id, :team, "
                           ":summary, :at)", ticket)
            else:
                ticket = dict(found)
        return {"ticket_id": ticket["ticket_id"], "invoice_id": ticket["invoice_id"],
                "team": ticket["team"], "deduplicated": found is not None}

    def tickets(self) -> list[dict[str, Any]]:
        """Every ticket opened, in order."""
        return self._rows("SELECT * FROM tickets ORDER BY at")

    # -- payments ------------------------------------------------------------------------
    def payment(self, invoice_id: str) -> dict[str, Any]:
        """Whether the customer has paid, and how much."""
        doc = self._fixture(invoice_id)
        rule = doc.get("payment") or {}
        balance = Decimal(doc["amount"]) - self._written_off(invoice_id)
        paid = False
        amount = balance
        if "after_reminders" in rule and self._reminded(invoice_id) >= rule["after_reminders"]:
            paid, amount = True, Decimal(rule.get("amount", doc["amount"]))
        if rule.get("after_write_off") and self._written_off(invoice_id) > 0:
            paid = True
        return {"invoice_id": invoice_id, "paid": paid,
                "amount_paid": str(amount) if paid else "0.00"}

    # -- messaging gateway ---------------------------------------------------------------
    def send_message(self, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """Deliver a message unless one with ``key`` was delivered already."""
        invoice_id = _text(body, "invoice_id")
        self._fixture(invoice_id)
        to, subject, text = _text(body, "to"), _text(body, "subject"), _text(body, "body")
        with self._tx() as db:
            db.execute("INSERT INTO message_requests (key, at) VALUES (?, ?)", (key, time.time()))
            found = db.execute("SELECT * FROM messages WHERE key = ?", (key,)).fetchone()
            if found is None:
                n = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
                sent = {"key": key, "message_id": f"msg-{1001 + n}", "invoice_id": invoice_id,
                        "recipient": to, "subject": subject, "body": text, "at": time.time()}
                db.execute("INSERT INTO messages VALUES (:key, :message_id, :invoice_id, "
                           ":recipient, :subject, :body, :at)", sent)
            else:
                sent = dict(found)
        return {"message_id": sent["message_id"], "to": sent["recipient"],
                "invoice_id": sent["invoice_id"], "deduplicated": found is not None}

    def messages(self) -> list[dict[str, Any]]:
        """Every message delivered, in order."""
        return self._rows("SELECT * FROM messages ORDER BY at")

    def message_requests(self) -> list[str]:
        """The key of every send request received, duplicates included, in order."""
        return [r["key"] for r in self._rows("SELECT key FROM message_requests ORDER BY n")]

    # -- finance -------------------------------------------------------------------------
    def move_money(self, kind: str, key: str, body: dict[str, Any]) -> dict[str, Any]:
        """Record a refund or write-off, once per key."""
        invoice_id = _text(body, "invoice_id")
        inv = self.invoice(invoice_id)
        amount = _money(body.get("amount"), "amount")
        reason = _text(body, "reason")
        with self._tx() as db:
            found = db.execute("SELECT * FROM money WHERE key = ?", (key,)).fetchone()
            if found is None:
                if kind == "write_off" and amount > Decimal(inv["balance"]):
                    raise ServiceError(422, f"cannot write off {amount} INR of invoice "
                                            f"{invoice_id}: its balance is {inv['balance']} INR")
                n = db.execute("SELECT COUNT(*) FROM money").fetchone()[0]
                rec = {"key": key, "record_id": f"FIN-{301 + n}", "kind": kind,
                       "invoice_id": invoice_id, "amount": str(amount), "reason": reason,
                       "at": time.time()}
                db.execute("INSERT INTO money VALUES (:key, :record_id, :kind, :invoice_id, "
                           ":amount, :reason, :at)", rec)
            else:
                rec = dict(found)
        return _money_view(rec, deduplicated=found is not None)

    def money_record(self, key: str) -> dict[str, Any]:
        """The refund or write-off made with ``key``."""
        rows = self._rows("SELECT * FROM money WHERE key = ?", key)
        if not rows:
            raise ServiceError(404, f"no refund or write-off with key {key!r}")
        return _money_view(rows[0], deduplicated=False)

    def money_records(self) -> list[dict[str, Any]]:
        """Every refund and write-off, in order."""
        return self._rows("SELECT * FROM money ORDER BY at")


def _money_view(rec: dict[str, Any], *, deduplicated: bool) -> dict[str, Any]:
    return {"record_id": rec["record_id"], "kind": rec["kind"], "invoice_id": rec["invoice_id"],
            "amount": rec["amount"], "currency": "INR", "deduplicated": deduplicated}


# -- HTTP ---------------------------------------------------------------------------------

Handler = Callable[[Systems, re.Match[str], dict[str, Any], str | None], dict[str, Any]]


def _keyed(fn: Callable[[str, dict[str, Any]], dict[str, Any]], key: str | None,
           body: dict[str, Any]) -> dict[str, Any]:
    if not key:
        raise ServiceError(400, "the Idempotency-Key header is required")
    return fn(key, body)


ROUTES: dict[str, list[tuple[str, re.Pattern[str], Handler]]] = {
    "erp": [
        ("GET", re.compile(r"/invoices/([\w-]+)"), lambda s, m, b, k: s.invoice(m[1])),
        ("POST", re.compile(r"/tickets"), lambda s, m, b, k: _keyed(s.open_ticket, k, b)),
    ],
    "payments": [
        ("GET", re.compile(r"/payments/([\w-]+)"), lambda s, m, b, k: s.payment(m[1])),
    ],
    "gateway": [
        ("POST", re.compile(r"/messages"), lambda s, m, b, k: _keyed(s.send_message, k, b)),
    ],
    "finance": [
        ("POST", re.compile(r"/refunds"),
         lambda s, m, b, k: _keyed(lambda key, body: s.move_money("refund", key, body), k, b)),
        ("POST", re.compile(r"/write-offs"),
         lambda s, m, b, k: _keyed(lambda key, body: s.move_money("write_off", key, body), k, b)),
        ("GET", re.compile(r"/records/(.+)"), lambda s, m, b, k: s.money_record(m[1])),
    ],
}
"""Each service's endpoints: method, path pattern, handler."""


def _handler_class(systems: Systems, service: str) -> type[BaseHTTPRequestHandler]:
    routes = ROUTES[service]

    class ServiceHandler(BaseHTTPRequestHandler):
        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            raw = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _dispatch(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                if not isinstance(body, dict):
                    raise ServiceError(400, "the request body must be a JSON object")
                for verb, pattern, handle in routes:
                    match = pattern.fullmatch(path)
                    if verb == method and match:
                        self._answer(200, handle(systems, match, body,
                                                 self.headers.get("Idempotency-Key")))
                        return
                raise ServiceError(404, f"{service} has no endpoint {method} {path}")
            except ServiceError as exc:
                self._answer(exc.status, {"error": str(exc)})
            except ValueError as exc:
                self._answer(400, {"error": f"malformed request: {exc}"})

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the demo prints what matters itself."""

    return ServiceHandler


@dataclass
class Running:
    """The services, each listening on its own local port."""

    urls: dict[str, str]
    servers: list[ThreadingHTTPServer]

    def close(self) -> None:
        """Stop every service."""
        for server in self.servers:
            server.shutdown()
            server.server_close()


def serve(systems: Systems, data: Path) -> Running:
    """Start every service on a free local port (in threads of this process) and write
    their URLs to ``<data>/services.json``, where the agent's tools find them."""
    urls: dict[str, str] = {}
    servers = []
    for service in ROUTES:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(systems, service))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name=f"{service}-service",
                         daemon=True).start()
        servers.append(server)
        urls[service] = f"http://127.0.0.1:{server.server_address[1]}"
    (data / SERVICES_FILE).write_text(json.dumps(urls, indent=2), encoding="utf-8")
    return Running(urls, servers)
