"""The payments service: refunds over HTTP, each idempotency key refunded once, kept in a
JSON file. ``on_refund`` runs when a refund is taken, before the answer goes back (the
demonstration kills the worker there)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Payments:
    """Serves ``POST /refunds`` and ``GET /refunds/<key>`` on 127.0.0.1 at a free port."""

    def __init__(self, path: Path, on_refund: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        if not path.exists():
            path.write_text(json.dumps({"refunds": {}, "requests": []}))
        lock, payments = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as separate writes: without this, Nagle's algorithm
            # and the client's delayed ACK hold each reply back for tens of milliseconds.
            disable_nagle_algorithm = True

            def _send(self, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with lock:
                    book = payments.book()
                    book["requests"].append(body["key"])
                    refund = book["refunds"].get(body["key"])
                    if refund is None:
                        refund = {"refund_id": f"R-{len(book['refunds']) + 1}",
                                  "order_id": body["order_id"], "amount": body["amount"]}
                        book["refunds"][body["key"]] = refund
                    payments.path.write_text(json.dumps(book, indent=1))
                on_refund(refund)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(refund)  # the worker may be gone

            def do_GET(self) -> None:
                key = self.path.removeprefix("/refunds/")
                with lock:
                    self._send(payments.book()["refunds"].get(key))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def book(self) -> dict[str, Any]:
        """The refunds by key, and every request's key in order of arrival."""
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    @property
    def url(self) -> str:
        """The service's base URL."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Payments:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
