"""A world for the bulk-operation tests: a client with no flow code and a worker's engine
with the flows, on one fresh SQLite or PostgreSQL database."""

from __future__ import annotations

import asyncio
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes import bulk_flows
from underway import events as ev
from underway.guard.approvals import public_key_of, register_approver
from underway.runner import Runner
from underway.store import Store, connect


class World:
    """The client and a worker's engine, each on its own connection to one database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client_store: Store = connect(url)
        self.worker_store: Store = connect(url)
        self.client = uw.Client(self.client_store)
        self.engine = uw.Engine(self.worker_store, flows=bulk_flows.FLOWS)
        bulk_flows.OUTAGE[0] = True

    def start(self, flow: str, n: int, tenant: str = "default") -> list[str]:
        """Start ``n`` runs of ``flow`` and drive them until they stop."""
        ids = [self.client.start(flow, {"sku": f"SKU-{i}"}, tenant_id=tenant)[0]
               for i in range(n)]
        self.drive()
        return ids

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def status(self, run_id: str, tenant: str = "default") -> str:
        return self.client.get_run(run_id, tenant_id=tenant).status

    def events(self, run_id: str, kind: type[ev.Event], tenant: str = "default") -> list[Any]:
        return [r.event for r in self.client.history(run_id, tenant_id=tenant)
                if isinstance(r.event, kind)]

    def approver(self, name: str, *roles: str, tenant: str = "default") -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        register_approver(self.client_store, name, public_key=public_key_of(key),
                          roles=roles, now=self.client.clock.now(), tenant_id=tenant)
        return key

    def close(self) -> None:
        self.client_store.close()
        self.worker_store.close()
