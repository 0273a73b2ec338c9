"""Child process for the trace crash test: a worker exporting its spans over OTLP/HTTP
(the stock exporter) to the test's receiver, driving one run to its end.

    python tests/crash/traced_worker.py --db URL --otlp URL --run RUN_ID [--run ...]
        [--interval S] [--no-recover]

A long ``--interval`` keeps the worker from sending a batch before it is killed; the
worker sends what is left when it stops. ``--no-recover`` keeps it from sending, at
start, what other workers journaled and did not send.

The run (flow ``traced_orders``, started by the test over HTTP with a ``traceparent``)
looks the customer up, then quotes the invoice (read-only; its tool records the invoice
id and the quote, never the card or the token), charges the card (mutating, idempotent,
so a charge whose outcome a crash hid is charged again with the same key) and asks a
model, then finishes. The customer, card, token, receipt and reply are strings no trace
may contain. With ``UNDERWAY_CRASH_POINTS=effect.after_run`` and
``UNDERWAY_CRASH_AFTER=CHARGE_RUNS``, the process kills itself right after the charge
ran, before its outcome is journaled.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pydantic import BaseModel, SecretStr

import underway as uw
from underway.effects import ModelReply
from underway.events import JSON
from underway.guard.policy import policy_from_dict
from underway.runner import Runner
from underway.store import connect
from underway.telemetry import Tracing, span_exporter

CUSTOMER = "Ananya-SECRET-customer"
CARD = "4111-SECRET-card-0042"
TOKEN = "tok-SECRET-token-77"
RECEIPT = "rcpt-SECRET-receipt"
REPLY = "SECRET-model-reply"
INVOICE = "INV-2024-0042"
"""The one value a tool lets traces record (as an argument and in the quote)."""
CHARGE_RUNS = 3
"""Tool executions up to and including the charge (lookup, quote, charge)."""


class Order(BaseModel):
    """The run's input."""

    customer: str
    card: str
    invoice: str


class Progress(BaseModel):
    """The run's state."""

    email: str = ""
    charged: bool = False


class QuoteArgs(BaseModel):
    """The quote's arguments: the card is a secret by type."""

    invoice: str
    card: SecretStr


class Quote(BaseModel):
    """The quote: the token is declared sensitive by the tool."""

    invoice: str
    cents: int
    token: str


@uw.tool(mutating=False)
async def find_customer(args: dict[str, Any]) -> dict[str, Any]:
    """Look a customer up."""
    return {"email": f"{args['customer']}@example.com"}


@uw.tool(mutating=False, trace_args=True, trace_result=True, sensitive=("token",))
async def quote(args: QuoteArgs) -> Quote:
    """Quote an invoice."""
    return Quote(invoice=args.invoice, cents=1234, token=TOKEN)


@uw.tool(idempotent=True)
async def charge(args: dict[str, Any]) -> dict[str, Any]:
    """Charge a card."""
    return {"receipt": RECEIPT, "card": args["card"]}


class FixedModel:
    """A model that always says the same."""

    name = "claude-test"

    async def complete(self, request: JSON) -> ModelReply:
        return ModelReply({"text": REPLY}, "claude-test", 12, 7, 0.01)


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "all", "tools": ["*"], "outcome": "allow"}]})
orders: uw.Flow[Progress, Order] = uw.Flow(
    "traced_orders", state=Progress, input=Order, tools=[find_customer, quote, charge],
    policy=POLICY)


@orders.step
async def look_up(ctx: uw.RunContext[Progress, Order]) -> Any:
    found = await ctx.call(find_customer, {"customer": ctx.input.customer})
    ctx.state.email = found["email"]
    return ctx.goto(charge_card)


@orders.step
async def charge_card(ctx: uw.RunContext[Progress, Order]) -> Any:
    await ctx.call(quote, {"invoice": ctx.input.invoice, "card": ctx.input.card})
    await ctx.call(charge, {"card": ctx.input.card, "to": ctx.state.email})
    await ctx.model(FixedModel(), {"prompt": f"was {ctx.input.card} charged?"})
    ctx.state.charged = True
    return ctx.goto(finish)


@orders.step
async def finish(ctx: uw.RunContext[Progress, Order]) -> Any:
    return ctx.done({"charged": ctx.state.charged})


async def drive(engine: uw.Engine, run_ids: list[str]) -> list[str]:
    """Advance the runs until they are final; a run still leased by a dead worker is
    claimed once its lease expires."""
    runner = Runner(engine, poll=0.05)
    while True:
        await runner.run_until_idle()
        rows = [await engine.io(engine.store.get_run, "default", r) for r in run_ids]
        statuses = [str(row.status) for row in rows if row is not None]
        if len(statuses) == len(run_ids) and all(
                s in ("completed", "failed", "cancelled", "escalated", "dead")
                for s in statuses):
            return statuses
        await engine.clock.sleep_until(engine.clock.now() + runner.poll)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--otlp", required=True)
    p.add_argument("--run", required=True, action="append")
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--no-recover", action="store_true")
    a = p.parse_args(argv)
    store = connect(a.db)
    tracing = Tracing(store, span_exporter("otlp", endpoint=a.otlp), flows=[orders],
                      interval=a.interval, recover_window=None if a.no_recover else 3600.0)
    engine = uw.Engine(store, flows=[orders], lease_ttl=1.0, metrics=tracing)
    statuses = asyncio.run(drive(engine, a.run))
    tracing.shutdown()
    store.close()
    print(*statuses, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
