"""One client over each transport, for the suite that proves they behave the same: a
database URL (SQLite or a real PostgreSQL), or ``underway serve`` on a real uvicorn server on
a free port over the same kind of database, reached with API keys. A worker's engine with
the flows runs on the same database; one clock drives them all."""

from __future__ import annotations

import asyncio
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.invoice_flows import Invoice, Notes, refunds, reminders
from underway.apikeys import issue_key
from underway.clock import ManualClock
from underway.effects import Emit, ModelReply
from underway.events import JSON
from underway.guard.approvals import public_key_of, register_approver
from underway.runner import Runner
from underway.service import ServerThread, create_app
from underway.store import Store, connect
from underway.testing import ScriptedModel

T0 = 1.8e9
TRANSPORTS = ("database", "http")

broken: uw.Flow[Notes, Invoice] = uw.Flow("broken", state=Notes, input=Invoice)
FIXED: list[bool] = []


@broken.step
async def parse(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    if not FIXED:
        raise ValueError("cannot parse the invoice")
    return ctx.done("parsed")


asker: uw.Flow[Notes, Invoice] = uw.Flow("asker", state=Notes, input=Invoice)


@asker.step
async def ask(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    answer = await ctx.ask("Which warehouse?", context={"invoice": ctx.input.invoice},
                           role="ops")
    return ctx.done({"warehouse": answer})


parent: uw.Flow[Notes, Invoice] = uw.Flow("parent", state=Notes, input=Invoice)


@parent.step
async def spawn(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    await ctx.start("reminders", ctx.input.model_dump(), key="first")
    return ctx.done("spawned")


class Paced:
    """A streaming model that says its first word, waits until ``seen`` is set (a reader
    saw that word), then says the rest: a reader sees the answer while it is made."""

    name = "paced"

    def __init__(self) -> None:
        self.seen = asyncio.Event()

    async def complete(self, request: JSON) -> ModelReply:
        raise AssertionError("a streamed call is made with stream()")

    async def stream(self, request: JSON, emit: Emit) -> ModelReply:
        await emit({"type": "text", "text": "once "})
        await self.seen.wait()
        for word in ("upon ", "a ", "time"):
            await emit({"type": "text", "text": word})
        return ModelReply({"text": "once upon a time"}, "paced-1", 3, 4, 0.0)


PACED: list[Paced] = []
"""The model the next ``teller`` run streams from (none: a scripted model)."""
teller: uw.Flow[Notes, Invoice] = uw.Flow("teller", state=Notes, input=Invoice)


@teller.step
async def tell(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    model = PACED[-1] if PACED else ScriptedModel([{"text": "once upon a time"}])
    return ctx.done(await ctx.model(model, {"messages": [ctx.input.invoice]}, stream=True))


FLOWS = [reminders, refunds, broken, asker, parent, teller]


class World:
    """``client`` steers and reads, ``deciding`` delivers signed decisions (over HTTP an
    approver's key: no one role does both), on the transport named; ``store`` is the
    database itself, for what only an operator does there (registering approvers)."""

    def __init__(self, transport: str, url: str) -> None:
        self.transport = transport
        self.url = url
        self.clock = ManualClock(T0)
        self.store: Store = connect(url)
        self.worker_store: Store = connect(url)
        self.engine = uw.Engine(self.worker_store, flows=FLOWS, clock=self.clock)
        self.server: ServerThread | None = None
        FIXED.clear()
        PACED.clear()
        if transport == "database":
            self.client = uw.Client(url, clock=self.clock)
            self.deciding = self.client
            return
        self.server = ServerThread(create_app(uw.Client(self.store, clock=self.clock)))
        self.server.start()
        self.client = uw.Client(self.server.url, api_key=self.key("admin", "ops"),
                                clock=self.clock)
        self.deciding = uw.Client(self.server.url, api_key=self.key("approver", "desk"),
                                  clock=self.clock)

    def key(self, role: str, name: str, tenant: str = "default") -> str:
        """A new API key's token."""
        return issue_key(self.store, tenant_id=tenant, role=role, name=name,  # type: ignore[arg-type]
                         now=self.clock.now()).token

    def by(self, who: str) -> str:
        """Who the journal names for an action the client asked ``by=who``: over HTTP the
        API key (``ops``), never a name the caller claims."""
        return who if self.transport == "database" else "apikey:ops"

    def approver(self, name: str, *roles: str, tenant: str = "default") -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        register_approver(self.store, name, public_key=public_key_of(key), roles=roles,
                          now=self.clock.now(), tenant_id=tenant)
        return key

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def types(self, run_id: str) -> list[str]:
        return [type(r.event).__name__ for r in self.client.history(run_id)]

    def close(self) -> None:
        self.client.close()
        self.deciding.close()
        if self.server is not None:
            self.server.stop()
        self.store.close()
        self.worker_store.close()
