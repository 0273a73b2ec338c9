"""The shop the agent acts on: refunds over JSON HTTP, kept in ``shop.json``.

- ``GET /orders/<id>``: the order (amount, status);
- ``POST /refunds`` with ``{"order", "amount"}`` and an ``Idempotency-Key`` header: pays
  the refund once per key (a repeat gets the first answer), taking a moment as a bank does;
- ``GET /refunds/<key>``: whether that key was paid (what a reconcile hook asks).

Every request for a key is counted in ``attempts``, so a run can show that a refund asked
for twice was paid once.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ORDERS = {
    "A-1001": {"customer": "Asha", "amount": 1299, "status": "delivered, damaged"},
    "A-1002": {"customer": "Ravi", "amount": 450, "status": "delivered, wrong size"},
    "A-1003": {"customer": "Meera", "amount": 2100, "status": "lost in transit"},
    "A-1004": {"customer": "Kabir", "amount": 799, "status": "delivered, damaged"},
}
PAY_S = 0.4
"""How long paying a refund takes: long enough for a worker to die in the middle."""


class Shop:
    """The shop's records, saved to ``path`` after every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.data: dict[str, Any] = (json.loads(path.read_text()) if path.exists()
                                     else {"refunds": {}, "attempts": {}})

    def pay(self, key: str, order: str, amount: int) -> dict[str, Any]:
        """Pay ``amount`` for ``order`` once per ``key``."""
        with self.lock:
            self.data["attempts"][key] = self.data["attempts"].get(key, 0) + 1
            self._save()
            done = self.data["refunds"].get(key)
        if done is not None:
            return dict(done)
        time.sleep(PAY_S)
        with self.lock:
            paid = {"id": f"R-{len(self.data['refunds']) + 1:03d}", "order": order,
                    "amount": amount}
            self.data["refunds"].setdefault(key, paid)
            self._save()
            return dict(self.data["refunds"][key])

    def paid(self, key: str) -> dict[str, Any] | None:
        """The refund paid for ``key``, if any."""
        with self.lock:
            found = self.data["refunds"].get(key)
            return None if found is None else dict(found)

    def refunds(self) -> dict[str, Any]:
        """Every refund paid, by key."""
        with self.lock:
            return dict(self.data["refunds"])

    def _save(self) -> None:
        self.path.write_text(json.dumps(self.data, indent=1))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A worker killed mid-request leaves its connection broken: nothing to report.
        pass


class ShopServer:
    """Serves a :class:`Shop` on 127.0.0.1 from a background thread."""

    def __init__(self, shop: Shop) -> None:
        self.shop = shop
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                kind, _, name = self.path.strip("/").partition("/")
                if kind == "orders" and name in ORDERS:
                    self.reply(200, {"order": name, **ORDERS[name]})
                elif kind == "refunds":
                    self.reply(200, {"paid": outer.shop.paid(name)})
                else:
                    self.reply(404, {"error": f"no {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                key = self.headers.get("idempotency-key")
                if self.path != "/refunds" or not key:
                    self.reply(400, {"error": "POST /refunds with an Idempotency-Key"})
                    return
                self.reply(200, outer.shop.pay(key, body["order"], int(body["amount"])))

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Where the shop answers."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ShopServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
