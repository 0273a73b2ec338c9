"""A fake outside service on real HTTP, served from the test process.

It stands for the systems an agent acts on (a mailer, a payment ledger, a CRM). It is the
one fake outside service of the crash suite (``tests/crash/test_crash.py``, whose workers
send no lease fences and get answers at once) and of the chaos suite
(``tests/crash/chaos/``, whose workers fence every request with their lease token and
report their leases to ``/witness``; there each lookup and effect takes a little time).
Their worker processes reach it from their tools:

- ``GET /customers/<id>`` — a read-only lookup with deterministic answers;
- ``POST /effects`` with ``{"key", "kind", "idempotent", "payload"}`` — performs an effect.
  Every delivery is counted per key. An idempotent delivery of a key already seen is
  acknowledged with the first result and changes nothing; a non-idempotent one is performed
  again (that is exactly the double effect the engine must never cause);
- ``GET /effects/<key>`` — whether the key was delivered, and its first result (what a
  reconcile hook or an operator asks);
- both may carry a *fence* (``"run"`` and ``"fence"`` in the body; ``?run=&fence=`` in the
  query): the lease token of the worker asking. The service remembers the highest token
  it has seen per run and answers 409, performing nothing, to a lower one. This is how an
  outside system makes a non-idempotent effect safe against a worker that was paused past
  its lease with the request still to send: once the run's new holder has asked about the
  key, the old holder's late request is refused instead of performed a second time.
  Requests without a fence are never refused;
- ``POST /witness`` — an activation reports which lease it holds while it runs a step.
  Every report is kept, including those of steps whose commit was later refused: those are
  the stale writes the journal must never show.

Everything lives in memory and dies with the server: nothing persists between tests.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, unquote


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


@dataclass(frozen=True)
class Witness:
    """One step's report of the lease it ran under, with the time it arrived."""

    run: str
    step: str
    at: str
    """``start`` or ``end`` of the step."""
    owner: str
    token: int
    head: int
    received: float


@dataclass
class Ledger:
    """What the service saw, guarded by one lock (the server is threaded).

    The suites read it through :meth:`snapshot` (the crash suite: the effects alone) and
    :meth:`snapshot_with_witnesses` (the chaos suite: the effects and the witness reports,
    taken together).
    """

    effects: dict[str, Delivery] = field(default_factory=dict)
    witnesses: list[Witness] = field(default_factory=list)
    fences: dict[str, int] = field(default_factory=dict)
    """The highest lease token seen per run."""
    refused: int = 0
    """Requests refused because a newer lease token had been seen for their run."""
    lookups: int = 0
    """``GET /customers/<id>`` requests answered."""
    queries: int = 0
    """``GET /effects/<key>`` requests answered."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, run: str | None, fence: int | None) -> bool:
        """Whether a request fenced with ``fence`` for ``run`` may proceed (call with the
        lock held); raises the run's fence when ``fence`` is newer. An unfenced request
        always proceeds."""
        if run is None or fence is None:
            return True
        if fence < self.fences.get(run, 0):
            self.refused += 1
            return False
        self.fences[run] = fence
        return True

    def deliver(self, key: str, kind: str, idempotent: bool, payload: Any,
                run: str | None = None, fence: int | None = None) -> dict[str, Any] | None:
        """Perform (or, for an idempotent re-delivery, acknowledge) the effect ``key``;
        None when the fence is stale."""
        with self.lock:
            if not self.admit(run, fence):
                return None
            seen = self.effects.get(key)
            if seen is None:
                result = {"id": f"{kind}-{len(self.effects) + 1}", "key": key}
                self.effects[key] = Delivery(key, kind, idempotent, payload, result)
                return result
            seen.deliveries += 1
            if not idempotent:
                seen.performed += 1
            return seen.result

    def _copy_effects(self) -> dict[str, Delivery]:
        """A copy of every recorded effect, by key (call with the lock held)."""
        return {
            k: Delivery(d.key, d.kind, d.idempotent, d.payload, dict(d.result),
                        d.deliveries, d.performed)
            for k, d in self.effects.items()
        }

    def snapshot(self) -> dict[str, Delivery]:
        """A copy of every recorded effect, by key."""
        with self.lock:
            return self._copy_effects()

    def snapshot_with_witnesses(self) -> tuple[dict[str, Delivery], list[Witness]]:
        """Copies of every recorded effect (by key) and every witness report, taken at one
        moment."""
        with self.lock:
            return self._copy_effects(), list(self.witnesses)


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

    def _take_time(self) -> None:
        if self.server.delay:
            time.sleep(self.server.delay)

    def do_GET(self) -> None:
        self.server.open.wait()
        ledger = self.server.ledger
        if self.path.startswith("/customers/"):
            self._take_time()
            with ledger.lock:
                ledger.lookups += 1
            self._reply(200, customer_profile(unquote(self.path.removeprefix("/customers/"))))
        elif self.path.startswith("/effects/"):
            path, _, query = self.path.partition("?")
            key = unquote(path.removeprefix("/effects/"))
            q = parse_qs(query)
            run = q["run"][0] if "run" in q else None
            fence = int(q["fence"][0]) if "fence" in q else None
            with ledger.lock:
                if not ledger.admit(run, fence):
                    self._reply(409, {"error": "stale fence"})
                    return
                ledger.queries += 1
                seen = ledger.effects.get(key)
                body = {"seen": seen is not None, "result": seen.result if seen else None}
            self._reply(200, body)
        else:
            self._reply(404, {"error": f"no route {self.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        # A client killed mid-request leaves a short body: such a request never happened.
        raw = self.rfile.read(length)
        if len(raw) != length:
            return
        body = json.loads(raw)
        self.server.open.wait()
        ledger = self.server.ledger
        if self.path == "/effects":
            self._take_time()
            fence = body.get("fence")
            result = ledger.deliver(str(body["key"]), str(body["kind"]),
                                    bool(body.get("idempotent")), body.get("payload"),
                                    body.get("run"), None if fence is None else int(fence))
            if result is None:
                self._reply(409, {"error": "stale fence"})
            else:
                self._reply(200, result)
        elif self.path == "/witness":
            w = Witness(str(body["run"]), str(body["step"]), str(body["at"]),
                        str(body["owner"]), int(body["token"]), int(body["head"]), time.time())
            with ledger.lock:
                ledger.witnesses.append(w)
            self._reply(200, body)
        else:
            self._reply(404, {"error": f"no route {self.path}"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    ledger: Ledger
    delay: float
    open: threading.Event

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A worker killed mid-request leaves a broken connection behind: not news."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class OutsideService:
    """The fake service on 127.0.0.1 (an ephemeral port), served from a background thread,
    recording what it sees in :attr:`ledger`.

    ``delay``: seconds each lookup and effect takes, so that runs spend their time in
    flight the way they do against real services (0: answer at once).

    >>> with OutsideService() as svc:
    ...     svc.url  # http://127.0.0.1:PORT
    """

    def __init__(self, *, delay: float = 0.0) -> None:
        self.ledger = Ledger()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.ledger = self.ledger
        self._server.delay = delay
        self._server.open = threading.Event()
        self._server.open.set()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """Base URL of the running service."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def hold(self) -> None:
        """Keep every request waiting from now on, until :meth:`release`: the runs stop
        at their next call, and hold still while the test changes the world around them."""
        self._server.open.clear()

    def release(self) -> None:
        """Answer the requests held since :meth:`hold`, and the next ones."""
        self._server.open.set()

    def start(self) -> Self:
        """Start serving in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
