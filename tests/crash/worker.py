"""Child process for the crash tests: start a batch of runs and drive them to an end.

    python tests/crash/worker.py --db URL --service URL --tenant T --runs N [--mix M]
                                 [--concurrency C]

Run ``i`` of a batch is a dunning run for customer ``c{i}`` over :func:`invoices_for`
(``i``) — look the customer up (read-only), then per invoice: send a reminder (mutating,
not idempotent, reconciled with the service), sleep on a durable timer, record the payment
(idempotent) — unless :func:`is_letter_run`: then one letter is posted by a
mutating, non-idempotent tool with *no* reconcile hook, whose unknown outcome escalates to
an operator. Runs are started with idempotency keys, so a restarted child finds the runs
of its predecessor instead of creating new ones.

The child exits when every run of the batch is final or escalated, printing one JSON line
with the fault points it passed (``UNDERWAY_CRASH_AFTER`` arms them; see
:mod:`underway.faults`) and how many of its commits shared a transaction with another
(``grouped``: its runs in flight commit together, :mod:`underway.engine._group`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.request
from typing import Any

from pydantic import BaseModel

from underway import CallInfo, Engine, Flow, Reconciled, RunContext, Runner, connect, faults, tool

SLEEP_S = 0.02
"""The durable sleep between a reminder and the payment: short, but a real timer."""
CALL_TIMEOUT_S = 60.0
"""Every tool's timeout (and its HTTP request's): the service answers in milliseconds, so
this only turns a hang into a failure. A worker starved of CPU, or frozen, for seconds
must not see its calls time out."""


def invoices_for(i: int) -> list[dict[str, Any]]:
    """The invoices of run ``i`` of a batch (2 to 4 of them)."""
    return [{"id": f"inv-{i}-{k}", "cents": 1000 * (i + 1) + 7 * k} for k in range(2 + i % 3)]


MIXES = ("mixed", "dunning", "letters")
"""Batches: alternating dunning and letter runs, or only one kind."""


def is_letter_run(i: int, mix: str = "mixed") -> bool:
    """Whether run ``i`` of a batch posts a letter (the flow without a reconcile hook)."""
    return mix == "letters" or (mix == "mixed" and i % 2 == 1)


def run_key(tenant: str, i: int) -> str:
    """The idempotency key that starts run ``i`` of ``tenant``'s batch."""
    return f"{tenant}-run-{i}"


def http_json(method: str, url: str, body: Any = None) -> Any:
    """Send ``body`` as JSON to the outside service; its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as resp:
        return json.loads(resp.read())


class Invoice(BaseModel):
    """One unpaid invoice."""

    id: str
    cents: int


class Dunning(BaseModel):
    """Input of a dunning run: a customer and their unpaid invoices."""

    customer: str
    invoices: list[Invoice]


class DunningState(BaseModel):
    """Progress of a dunning run."""

    email: str = ""
    ref: str = ""
    started_at: str = ""
    item: int = 0
    reminders: list[str] = []
    payments: list[str] = []
    paid_cents: int = 0


class Letter(BaseModel):
    """Input of a letter run."""

    customer: str


class LetterState(BaseModel):
    """Progress of a letter run."""

    address: str = ""


def build(service: str) -> tuple[list[Flow[Any, Any]], list[Any]]:
    """The flows and tools of the crash workload, talking to ``service``."""

    @tool(mutating=False, timeout=CALL_TIMEOUT_S)
    def lookup_customer(args: dict[str, Any]) -> Any:
        return http_json("GET", f"{service}/customers/{args['customer']}")

    def effect(kind: str, idempotent: bool, args: dict[str, Any], info: CallInfo) -> Any:
        return http_json("POST", f"{service}/effects",
                     {"key": info.key, "kind": kind, "idempotent": idempotent, "payload": args})

    async def reminder_delivered(key: str) -> Reconciled:
        seen = await asyncio.to_thread(http_json, "GET", f"{service}/effects/{key}")
        return Reconciled.happened(seen["result"]) if seen["seen"] else Reconciled.not_happened()

    @tool(mutating=True, idempotent=False, timeout=CALL_TIMEOUT_S, reconcile=reminder_delivered)
    def send_reminder(args: dict[str, Any], info: CallInfo) -> Any:
        return effect("reminder", False, args, info)

    @tool(mutating=True, idempotent=True, timeout=CALL_TIMEOUT_S)
    def record_payment(args: dict[str, Any], info: CallInfo) -> Any:
        return effect("payment", True, args, info)

    @tool(mutating=True, idempotent=False, timeout=CALL_TIMEOUT_S)
    def post_letter(args: dict[str, Any], info: CallInfo) -> Any:
        return effect("letter", False, args, info)

    dunning: Flow[DunningState, Dunning] = Flow("dunning", state=DunningState, input=Dunning)

    @dunning.step(start=True)
    async def lookup(ctx: RunContext[DunningState, Dunning]) -> Any:
        profile = await ctx.call(lookup_customer, {"customer": ctx.input.customer})
        assert isinstance(profile, dict)
        ctx.state.email = str(profile["email"])
        ctx.state.ref = ctx.uuid()
        ctx.state.started_at = ctx.now().isoformat()
        return ctx.goto(remind)

    @dunning.step
    async def remind(ctx: RunContext[DunningState, Dunning]) -> Any:
        inv = ctx.input.invoices[ctx.state.item]
        sent = await ctx.call(send_reminder, {
            "customer": ctx.input.customer, "invoice": inv.id, "cents": inv.cents,
            "to": ctx.state.email, "ref": ctx.state.ref, "at": ctx.now().isoformat(),
        })
        assert isinstance(sent, dict)
        ctx.state.reminders.append(str(sent["id"]))
        return ctx.sleep(SLEEP_S, then=collect)

    @dunning.step
    async def collect(ctx: RunContext[DunningState, Dunning]) -> Any:
        inv = ctx.input.invoices[ctx.state.item]
        paid = await ctx.call(record_payment, {
            "customer": ctx.input.customer, "invoice": inv.id, "cents": inv.cents,
            "ref": ctx.state.ref,
        })
        assert isinstance(paid, dict)
        ctx.state.payments.append(str(paid["id"]))
        ctx.state.paid_cents += inv.cents
        ctx.state.item += 1
        if ctx.state.item < len(ctx.input.invoices):
            return ctx.goto(remind)
        return ctx.done({
            "customer": ctx.input.customer, "ref": ctx.state.ref,
            "reminders": ctx.state.reminders, "payments": ctx.state.payments,
            "paid_cents": ctx.state.paid_cents,
        })

    letters: Flow[LetterState, Letter] = Flow("letters", state=LetterState, input=Letter)

    @letters.step(start=True)
    async def address(ctx: RunContext[LetterState, Letter]) -> Any:
        profile = await ctx.call(lookup_customer, {"customer": ctx.input.customer})
        assert isinstance(profile, dict)
        ctx.state.address = str(profile["name"])
        return ctx.goto(post)

    @letters.step
    async def post(ctx: RunContext[LetterState, Letter]) -> Any:
        sent = await ctx.call(post_letter, {"customer": ctx.input.customer,
                                            "to": ctx.state.address})
        assert isinstance(sent, dict)
        return ctx.done({"customer": ctx.input.customer, "letter": sent["id"]})

    tools = [lookup_customer, send_reminder, record_payment, post_letter]
    return [dunning, letters], tools


async def drive(
    engine: Engine, tenant: str, runs: int, mix: str, concurrency: int = 1
) -> dict[str, str]:
    """Start the batch (idempotently) and advance it until every run is final or escalated,
    ``concurrency`` runs at once (their commits grouped)."""
    ids = []
    data: dict[str, Any]
    for i in range(runs):
        if is_letter_run(i, mix):
            flow, data = "letters", {"customer": f"c{i}"}
        else:
            flow, data = "dunning", {"customer": f"c{i}", "invoices": invoices_for(i)}
        run_id, _ = engine.start(flow, data, tenant_id=tenant, idempotency_key=run_key(tenant, i))
        ids.append(run_id)
    runner = Runner(engine, poll=0.05, concurrency=concurrency)
    while True:
        await runner.run_until_idle()
        statuses = statuses_of(engine, tenant, ids)
        if all(s in ("completed", "failed", "cancelled", "escalated") for s in statuses.values()):
            return statuses
        await until_next_wake(engine, runner)


def statuses_of(engine: Engine, tenant: str, ids: list[str]) -> dict[str, str]:
    """Run id -> status, as the run rows say now."""
    statuses = {}
    for run_id in ids:
        row = engine.store.get_run(tenant, run_id)
        assert row is not None
        statuses[run_id] = row.status
    return statuses


async def until_next_wake(engine: Engine, runner: Runner) -> None:
    """Sleep until the next run is due, or one poll interval at most."""
    wake = engine.store.next_wake_at()
    now = engine.clock.now()
    await engine.clock.sleep_until(now + runner.poll if wake is None
                                   else min(wake, now + runner.poll))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the child process."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--db", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--tenant", required=True)
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--mix", choices=MIXES, default="mixed")
    p.add_argument("--lease-ttl", type=float, default=2.0)
    p.add_argument("--concurrency", type=int, default=1)
    a = p.parse_args(argv)
    flows, tools = build(a.service)
    store = connect(a.db)
    engine = Engine(store, flows=flows, tools=tools, lease_ttl=a.lease_ttl, checkpoint_every=7)
    statuses = asyncio.run(drive(engine, a.tenant, a.runs, a.mix, a.concurrency))
    store.close()
    committer = engine.committer
    grouped = 0 if committer is None else committer.batches - committer.groups
    print(json.dumps({"hits": faults.hits(), "statuses": statuses, "grouped": grouped}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
