"""A real ``underway serve`` for the service tests: the app on a real uvicorn server (in a
thread, on an ephemeral port, ready once /healthz answers), over SQLite or a real
PostgreSQL; a worker's engine with the flows on the same database; two tenants with a key
of every role each; httpx as the client."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.invoice_flows import refunds, reminders
from underway.apikeys import ROLES, issue_key
from underway.clock import ManualClock
from underway.guard.approvals import public_key_of, register_approver
from underway.runner import Runner
from underway.scheduling.intake import Routes, Signal, StartFlow
from underway.service import ServerThread, create_app
from underway.store import Store, connect

TENANTS = ("acme", "globex")


FLOWS = [reminders, refunds]
ROUTES = Routes({"invoice.created": StartFlow("reminders"), "invoice.paid": Signal("paid")})


class World:
    """The server, the worker and the keys (``token[tenant][role]``)."""

    def __init__(self, url: str, *, flows: bool = False,
                 session_secret: bytes | None = None) -> None:
        self.store_url = url
        self.clock = ManualClock(time.time())
        self.store: Store = connect(url)
        self.worker_store: Store = connect(url)
        client = uw.Client(self.store, clock=self.clock, flows=FLOWS if flows else ())
        self.app = create_app(client, routes=ROUTES, session_secret=session_secret)
        self.engine = uw.Engine(self.worker_store, flows=FLOWS, clock=self.clock)
        self.token = {t: {r: issue_key(self.store, tenant_id=t, role=r, name=f"{t}-{r}",
                                       now=self.clock.now()).token for r in ROLES}
                      for t in TENANTS}
        self.server = ServerThread(self.app)
        self.server.start()
        self.http = httpx.Client(base_url=self.server.url, timeout=30.0)

    def headers(self, tenant: str = "acme", role: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token[tenant][role]}"}

    def call(self, method: str, path: str, *, tenant: str = "acme", role: str = "admin",
             **kwargs: Any) -> httpx.Response:
        headers = {**self.headers(tenant, role), **kwargs.pop("headers", {})}
        return self.http.request(method, path, headers=headers, **kwargs)

    def start(self, flow: str = "reminders", invoice: str = "INV-1", *, tenant: str = "acme",
              drive: bool = True) -> str:
        r = self.call("POST", "/v1/runs", tenant=tenant, role="operator",
                      json={"flow": flow, "input": {"invoice": invoice, "amount": 5}})
        assert r.status_code == 201, r.text
        if drive:
            self.drive()
        return str(r.json()["run_id"])

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def approver(self, tenant: str, name: str, *roles: str) -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        register_approver(self.store, name, public_key=public_key_of(key), roles=roles,
                          now=self.clock.now(), tenant_id=tenant)
        return key

    def client_pending(self, run_id: str, tenant: str = "acme") -> list[dict[str, Any]]:
        """The pending request of a run, as the API shows it (a list of zero or one)."""
        r = self.call("GET", f"/v1/approvals/{run_id}", tenant=tenant, role="viewer")
        return [r.json()] if r.status_code == 200 else []

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()
        self.server.stop()
        self.store.close()
        self.worker_store.close()
