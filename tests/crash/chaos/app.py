"""The application the chaos tests' worker processes run: ``underway worker --app app:app``.

One flow, ``chaos``, exercises everything a worker must get right under SIGKILL and SIGSTOP:

1. ``lookup`` — a read-only call (``GET /customers/<id>``);
2. ``charge`` — a mutating, non-idempotent call with a reconcile hook that asks the service
   whether the key arrived; then a short durable sleep. Both the call and the hook carry
   the run's fence (its lease token, raised by each reconcile query), which the service checks (see
   :mod:`fakes.outside_service`): without it, a worker frozen past its lease with the
   request still to send would deliver it late, after the run's new holder had reconciled
   "not happened" and sent it again (the known limit in docs/durability.md);
3. ``settle`` — a mutating, idempotent call (the service acknowledges re-deliveries);
4. ``lap`` — a ``goto`` loop of ``loops`` steps; the last finishes the run.

Every step begins and ends with a read-only ``witness`` call reporting the lease its
activation holds (owner, token) and the journal head that activation had committed to.
The report reaches the service as it happens, and its result — the same report — lands in
the journal only with a commit of that activation that was accepted (the first with the
step's first commit, the last with the step's ``StepCompleted``). The tests compare the
two: tokens in a journal never go backwards, and nothing is committed under a lease after
a newer lease was seen at work on the run.

The lease travels to the tools in a context variable, not in their arguments: arguments
are journaled by hash, and a step re-run under a new lease must make the same calls.

The service URL comes from ``$CHAOS_SERVICE``; :func:`build` takes it explicitly.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel

from underway import CallInfo, Flow, Reconciled, RunContext, Tool, tool

SLEEP_S = 0.05
"""The durable sleep between ``charge`` and ``settle``: short, but a real timer."""

FLOW = "chaos"

CALL_TIMEOUT_S = 60.0
"""Every tool's timeout (and its HTTP request's): the service answers in milliseconds, so
this only turns a hang into a failure. A worker starved of CPU, or frozen, for seconds
must not see its calls time out."""


class ChaosInput(BaseModel):
    """Input of a chaos run: a customer and how many laps of the loop to run."""

    customer: str
    loops: int = 3


class ChaosState(BaseModel):
    """Progress of a chaos run."""

    email: str = ""
    charge: str = ""
    payment: str = ""
    laps: int = 0


def expected_result(customer: str, laps: int, charge: str, payment: str) -> dict[str, Any]:
    """What a chaos run finishes with, given the ids the service gave its two effects."""
    return {"customer": customer, "email": f"{customer}@example.test", "charge": charge,
            "payment": payment, "laps": laps}


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def lease_of(ctx: RunContext[Any, Any]) -> tuple[str, int, int]:
    """(owner, lease token, committed journal head) of the activation running ``ctx``.

    A step has no public view of its lease — user code never needs one — so this reads the
    engine's activation; the tests need it to prove fencing from the journal itself.
    """
    act = getattr(getattr(ctx, "_x", None), "_act", None)
    lease = getattr(act, "lease", None)
    state = getattr(act, "state", None)
    pending = getattr(act, "pending", None)
    if lease is None or state is None or pending is None:
        raise RuntimeError("the engine's activation no longer exposes lease/state/pending; "
                           "update tests/crash/chaos/app.py:lease_of")
    return str(lease.owner), int(lease.token), int(state.seq) - len(pending)


ACTIVATION: ContextVar[tuple[str, int, int] | None] = ContextVar("chaos_activation",
                                                                default=None)
""":func:`lease_of` the step about to call a tool, set by the step right before the call.
A context variable reaches the tool and its reconcile hook, threads included."""


def _activation() -> tuple[str, int, int]:
    found = ACTIVATION.get()
    if found is None:
        raise RuntimeError("a chaos tool was called without ACTIVATION set by its step")
    return found


def build(service: str) -> tuple[list[Flow[Any, Any]], list[Tool]]:
    """The chaos flow and its tools, talking to the service at ``service``."""

    @tool(mutating=False, timeout=CALL_TIMEOUT_S)
    def lookup_customer(args: dict[str, Any]) -> Any:
        return _http("GET", f"{service}/customers/{args['customer']}")

    @tool(mutating=False, timeout=CALL_TIMEOUT_S)
    def witness(args: dict[str, Any]) -> Any:
        owner, token, head = _activation()
        return _http("POST", f"{service}/witness",
                     {**args, "owner": owner, "token": token, "head": head})

    async def charge_delivered(key: str, info: CallInfo) -> Reconciled:
        # The query's fence is above the attempt in doubt: the service refuses that attempt
        # should it arrive after this query (a timed-out request still on its way).
        seen = await asyncio.to_thread(
            _http, "GET", f"{service}/effects/{key}?run={info.run_id}&fence={info.fence}")
        return Reconciled.happened(seen["result"]) if seen["seen"] else Reconciled.not_happened()

    @tool(mutating=True, idempotent=False, timeout=CALL_TIMEOUT_S, reconcile=charge_delivered)
    def send_charge(args: dict[str, Any], info: CallInfo) -> Any:
        return _http("POST", f"{service}/effects", {
            "key": info.key, "kind": "charge", "idempotent": False, "payload": args,
            "run": info.run_id, "fence": info.fence})

    @tool(mutating=True, idempotent=True, timeout=CALL_TIMEOUT_S)
    def record_payment(args: dict[str, Any], info: CallInfo) -> Any:
        return _http("POST", f"{service}/effects", {
            "key": info.key, "kind": "payment", "idempotent": True, "payload": args})

    async def call(ctx: RunContext[Any, Any], t: Tool, args: dict[str, Any]) -> Any:
        ACTIVATION.set(lease_of(ctx))
        return await ctx.call(t, args)

    async def seen(ctx: RunContext[Any, Any], at: str) -> None:
        await call(ctx, witness, {"run": ctx.run_id, "step": ctx.step, "at": at})

    flow: Flow[ChaosState, ChaosInput] = Flow(FLOW, state=ChaosState, input=ChaosInput)

    @flow.step(start=True)
    async def lookup(ctx: RunContext[ChaosState, ChaosInput]) -> Any:
        await seen(ctx, "start")
        profile = await call(ctx, lookup_customer, {"customer": ctx.input.customer})
        ctx.state.email = str(profile["email"])
        await seen(ctx, "end")
        return ctx.goto(charge)

    @flow.step
    async def charge(ctx: RunContext[ChaosState, ChaosInput]) -> Any:
        await seen(ctx, "start")
        sent = await call(ctx, send_charge, {"customer": ctx.input.customer,
                                             "to": ctx.state.email})
        ctx.state.charge = str(sent["id"])
        await seen(ctx, "end")
        return ctx.sleep(SLEEP_S, then=settle)

    @flow.step
    async def settle(ctx: RunContext[ChaosState, ChaosInput]) -> Any:
        await seen(ctx, "start")
        paid = await call(ctx, record_payment, {"customer": ctx.input.customer,
                                                "charge": ctx.state.charge})
        ctx.state.payment = str(paid["id"])
        await seen(ctx, "end")
        return ctx.goto(lap)

    @flow.step
    async def lap(ctx: RunContext[ChaosState, ChaosInput]) -> Any:
        await seen(ctx, "start")
        ctx.state.laps += 1
        await seen(ctx, "end")
        if ctx.state.laps < ctx.input.loops:
            return ctx.goto(lap)
        s = ctx.state
        return ctx.done(expected_result(ctx.input.customer, s.laps, s.charge, s.payment))

    return [flow], [lookup_customer, witness, send_charge, record_payment]


def app() -> list[Flow[Any, Any] | Tool]:
    """What ``underway worker --app app:app`` loads: the flow and its tools."""
    service = os.environ.get("CHAOS_SERVICE")
    if not service:
        raise RuntimeError("set CHAOS_SERVICE to the chaos service's URL")
    flows, tools = build(service)
    return [*flows, *tools]
