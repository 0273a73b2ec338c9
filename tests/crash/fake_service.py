"""A fake outside service that crash-test workers talk to over real HTTP.

It stands for the systems an agent acts on (a mailer, a payment ledger, a CRM):

- ``GET /customers/<id>`` — a read-only lookup with deterministic answers;
- ``POST /effects`` with ``{"key", "kind", "idempotent", "payload"}`` — performs an effect.
  Every delivery is counted per key. An idempotent delivery of a key already seen is
  acknowledged with the first result and changes nothing; a non-idempotent one is recorded
  again (that is exactly the double effect the engine must never cause);
- ``GET /effects/<key>`` — whether the key was delivered, and its first result (what a
  reconcile hook or an operator asks).

Everything lives in memory and dies with the server: nothing persists between tests.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import unquote


def customer_profile(customer: str) -> dict[str, Any]:
    """The deterministic record ``GET /customers/<id>`` answers for ``customer``."""
    n = sum(customer.encode()) % 97
    return {"id": customer, "name": f"Customer {customer}", "email": f"{customer}@example.test",
            "tier": "gold" if n % 3 == 0 else "standard"}


@dataclass
class Delivery:
    """One effect as the service recorded it."""

    key: str
    kind: str
    idempotent: bool
    payload: Any
    result: dict[str, Any]
    deliveries: int = 1
    performed: int = 1


@dataclass
class Ledger:
    """What the service saw, guarded by one lock (the server is threaded)."""

    effects: dict[str, Delivery] = field(default_factory=dict)
    lookups: int = 0
    queries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def deliver(self, key: str, kind: str, idempotent: bool, payload: Any) -> dict[str, Any]:
        with self.lock:
            seen = self.effects.get(key)
            if seen is None:
                result = {"id": f"{kind}-{len(self.effects) + 1}", "key": key}
                self.effects[key] = Delivery(key, kind, idempotent, payload, result)
                return result
            seen.deliveries += 1
            if not idempotent:
                seen.performed += 1
            return seen.result

    def snapshot(self) -> dict[str, Delivery]:
        """A copy of every recorded effect, by key."""
        with self.lock:
            return {
                k: Delivery(d.key, d.kind, d.idempotent, d.payload, dict(d.result),
                            d.deliveries, d.performed)
                for k, d in self.effects.items()
            }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: the tests print their own summary."""

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        ledger = self.server.ledger
        if self.path.startswith("/customers/"):
            with ledger.lock:
                ledger.lookups += 1
            self._reply(200, customer_profile(unquote(self.path.removeprefix("/customers/"))))
        elif self.path.startswith("/effects/"):
            key = unquote(self.path.removeprefix("/effects/"))
            with ledger.lock:
                ledger.queries += 1
                seen = ledger.effects.get(key)
                body = {"seen": seen is not None, "result": seen.result if seen else None}
            self._reply(200, body)
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        if self.path != "/effects":
            self._reply(404, {"error": f"no route {self.path}"})
            return
        length = int(self.headers.get("Content-Length", "0"))
        # A client killed mid-request leaves a short body: such a request never happened.
        raw = self.rfile.read(length)
        if len(raw) != length:
            return
        body = json.loads(raw)
        result = self.server.ledger.deliver(
            str(body["key"]), str(body["kind"]), bool(body.get("idempotent")),
            body.get("payload"),
        )
        self._reply(200, result)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ledger: Ledger


class FakeService:
    """The fake service on 127.0.0.1 (an ephemeral port), served from a background thread.

    >>> with FakeService() as svc:
    ...     svc.url  # http://127.0.0.1:PORT
    """

    def __init__(self) -> None:
        self.ledger = Ledger()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.ledger = self.ledger
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL of the running service."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeService:
        """Start serving in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
