"""A checkout flow for the drill's own tests: ``underway drill --app payapp:app --setup
payapp:scenario`` (from this folder).

A local payment service (started by :func:`scenario` in the drill's process) prices an
order, charges it — once per request, like a card network: it does not deduplicate, so a
charge sent twice is charged twice — and files a receipt note once per idempotency key.
``charge`` sends a bearer token from the secret provider and is reconciled by asking the
service whether a charge with its key exists. :func:`tools` with ``careful=False`` is
the same flow written carelessly (``brokenapp.py``): errors swallowed, answers taken as
they come, and a reconcile hook that assumes a lost answer means nothing happened.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel

from underway import CallInfo, Flow, Reconciled, RetryPolicy, RunContext, Tool, tool
from underway.flow import Next
from underway.http import HTTPError, request
from underway.ops.drills import DrillSite, Scenario

URL_ENV = "PAYAPP_URL"
RETRY = RetryPolicy(max_attempts=4, initial_interval=0.05, max_interval=0.5)
HOSTS = ["127.0.0.1"]


class Order(BaseModel):
    order: str


class Quote(BaseModel):
    order: str
    amount: int


class Charge(BaseModel):
    charge_id: str
    order: str
    amount: int


class Note(BaseModel):
    note_id: str


class Checkout(BaseModel):
    amount: int = 0
    charge_id: str = ""


def tools(base: str, *, careful: bool = True) -> list[Tool]:
    """The three tools against the service at ``base``."""

    @tool(name="quote", read_only=True, hosts=HOSTS, retry=RETRY, timeout=5)
    async def quote(args: Order, info: CallInfo) -> dict[str, Any]:
        got = await request("GET", f"{base}/quotes/{args.order}", info=info)
        if careful:
            return got.expect(Quote).model_dump()
        body = got.body if isinstance(got.body, dict) else {}
        return {"order": args.order, "amount": int(body.get("amount", 0))}

    async def charged(key: str) -> Reconciled:
        if not careful:
            # Asks nobody: takes a charge whose answer was lost for one that never went out.
            return Reconciled.not_happened()
        try:
            got = await request("GET", f"{base}/charges/{key}",
                                info=CallInfo(key, "", "", "reconcile", 0))
        except HTTPError as exc:
            return Reconciled.not_happened() if exc.status == 404 else Reconciled.unknown()
        return Reconciled.happened(got.expect(Charge).model_dump())

    @tool(name="charge", secrets=("PSP_TOKEN",), hosts=HOSTS, reconcile=charged, retry=RETRY,
          timeout=5)
    async def charge(args: Quote, info: CallInfo) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {info.secrets['PSP_TOKEN']}"}
        try:
            got = await request("POST", f"{base}/charges", info=info, headers=headers,
                                json_body=args.model_dump())
        except HTTPError:
            if careful:
                raise
            return {"charge_id": "pending", "order": args.order, "amount": args.amount}
        if careful:
            return got.expect(Charge).model_dump()
        body = got.body if isinstance(got.body, dict) else {}
        return {"charge_id": str(body.get("charge_id", "pending")), "order": args.order,
                "amount": args.amount}

    @tool(name="note", idempotent=True, hosts=HOSTS, retry=RETRY, timeout=5)
    async def note(args: Charge, info: CallInfo) -> dict[str, Any]:
        got = await request("POST", f"{base}/notes", info=info, json_body=args.model_dump())
        return got.expect(Note).model_dump()

    return [quote, charge, note]


checkout: Flow[Checkout, Order] = Flow("checkout", state=Checkout, input=Order)


@checkout.step(start=True)
async def price(ctx: RunContext[Checkout, Order]) -> Next:
    q = Quote.model_validate(await ctx.call("quote", ctx.input))
    ctx.state.amount = q.amount
    return ctx.goto(pay)


@checkout.step
async def pay(ctx: RunContext[Checkout, Order]) -> Next:
    c = Charge.model_validate(await ctx.call(
        "charge", Quote(order=ctx.input.order, amount=ctx.state.amount)))
    ctx.state.charge_id = c.charge_id
    await ctx.call("note", c)
    return ctx.done({"charge_id": c.charge_id, "amount": c.amount})


def app() -> list[Any]:
    """The flow and its careful tools, against the service at ``$PAYAPP_URL``."""
    return [checkout, *tools(os.environ[URL_ENV])]


class Service(BaseHTTPRequestHandler):
    """The payment service: its records are the handler class's (one service per drill)."""

    charges: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] == "quotes":
            return self._send(200, {"order": parts[1], "amount": 100 + len(parts[1])})
        with self.lock:
            found = self.charges.get(parts[1], [])
        if found:
            return self._send(200, found[0])
        self._send(404, {"error": "no such charge"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        key = self.headers.get("Idempotency-Key", "")
        with self.lock:
            if self.path == "/charges":
                record = {"charge_id": f"ch-{uuid.uuid4().hex[:8]}", **body}
                self.charges.setdefault(key, []).append(record)
            else:
                record = self.notes.setdefault(key, {"note_id": f"n-{len(self.notes)}"})
        self._send(200, record)

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def scenario(site: DrillSite) -> Iterator[Scenario]:
    """The payment service for the drill, and one order per run."""
    Service.charges, Service.notes = {}, {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Service)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield Scenario(input=lambda i: {"order": f"o-{i}"},
                       env={URL_ENV: f"http://127.0.0.1:{httpd.server_address[1]}"})
        record = os.environ.get("PAYAPP_RECORD")
        if record:  # what the service saw, for the test to check against the report
            with open(record, "w", encoding="utf-8") as f:
                json.dump(Service.charges, f)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
