"""Flows whose hooks fail in every way a hook can, acting on the outside service of
``tests/fakes/outside_service.py`` (which counts every effect it performs, per key).

- ``loss``: a transfer (irreversible) is performed, then its answer is lost
  (``OutcomeUnknown``): its ``reconcile`` hook is asked at once.
- ``crash``: the transfer is performed, then the worker dies (:class:`Crash`): the next
  worker finds the intent without an outcome and asks ``reconcile``.
- ``compensate``: a seat is held, the charge fails, and the hold's ``compensate`` hook
  releases the seat (a non-idempotent effect), then fails.

Every step here does what a step may do with a failure: catch ``ToolCallError`` and try
again (``ctx.goto`` to itself), which runs the call under a new key. A hook that failed
and was read as the call failing would make the effect happen again.

``python tests/adversarial/hook_world.py --db URL --service URL --marker PATH`` is the
worker of the SIGKILL test: it drives the runs of the ``loss`` flow whose reconcile hook
creates ``PATH`` and then never answers, so the test kills the worker inside the hook.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.effects import Reconciled

HOOKS = ("loss", "crash", "compensate")
FAILURES = ("tool_call_error", "exception", "base_exception", "non_answer", "wrong_answer",
            "hang")
HOOK_TIMEOUT = 0.3
"""Seconds a failing hook gets (``hang`` runs past it)."""
TRIES = 3
"""How many times a step tries a call again under a new key after a failure."""


class Crash(SystemExit):
    """The worker dies mid-call, as under SIGKILL (the process stopping: no hook answer)."""


class Boom(BaseException):
    """A ``BaseException`` that is neither an ``Exception`` nor a cancellation."""


class Order(BaseModel):
    service: str


class Tries(BaseModel):
    tries: int = 0
    hold: dict[str, Any] = {}


def http(method: str, url: str, body: Any = None) -> Any:
    """One request to the outside service (blocking; tools call it on a thread)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


async def perform(service: str, key: str, kind: str, *, idempotent: bool = False) -> Any:
    """Have the outside service perform effect ``key``."""
    return await asyncio.to_thread(http, "POST", f"{service}/effects",
                                   {"key": key, "kind": kind, "idempotent": idempotent})


def failing(failure: str, hook: str) -> Any:
    """A hook (of ``hook``'s kind) that fails as ``failure`` says."""

    async def fail(*args: Any) -> Any:
        if failure == "tool_call_error":
            raise uw.ToolCallError("ledger", "LedgerDown", "the ledger is down", retryable=True)
        if failure == "exception":
            raise RuntimeError("the ledger query broke")
        if failure == "base_exception":
            raise Boom("the ledger query was aborted")
        if failure == "non_answer":
            return None
        if failure == "wrong_answer":
            # reconcile: not a Reconciled; compensate: not JSON.
            return {"seen": True} if hook != "compensate" else {"at": object()}
        await asyncio.Event().wait()  # hang: never answers
        return None

    return fail


def honest(service: str) -> Any:
    """A reconcile hook that asks the outside service what happened to the key."""

    async def reconcile(key: str) -> Reconciled:
        seen = await asyncio.to_thread(http, "GET", f"{service}/effects/{key}")
        return Reconciled.happened(seen["result"]) if seen["seen"] else Reconciled.not_happened()

    return reconcile


def transfer_flow(name: str, *, after: str, reconcile: Any,
                  hook_timeout: float = HOOK_TIMEOUT) -> uw.Flow[Any, Any]:
    """A flow whose one step transfers money; after the transfer is performed the tool
    loses its answer (``after="loss"``) or the worker dies (``after="crash"``)."""

    @uw.tool(name="transfer", irreversible=True, reconcile=reconcile,
             hook_timeout=hook_timeout)
    async def transfer(args: Order, info: uw.CallInfo) -> dict[str, Any]:
        await perform(args.service, info.key, "transfer")
        if after == "crash":
            raise Crash(1)
        raise uw.OutcomeUnknown("the connection broke before the answer came back")

    flow: uw.Flow[Tries, Order] = uw.Flow(name, state=Tries, input=Order, tools=[transfer])

    @flow.step
    async def go(ctx: uw.RunContext[Tries, Order]) -> Any:
        try:
            done = await ctx.call(transfer, {"service": ctx.input.service})
        except uw.ToolCallError as exc:
            ctx.state.tries += 1
            if ctx.state.tries < TRIES:
                return ctx.goto(go)
            return ctx.done({"failed": exc.error_type})
        return ctx.done({"transferred": done})

    return flow


def seat_flow(name: str, *, compensate: Any) -> uw.Flow[Any, Any]:
    """A flow that holds a seat, fails to charge, and undoes the hold."""

    @uw.tool(name="hold_seat", idempotent=True, hook_timeout=HOOK_TIMEOUT)
    async def hold_seat(args: Order, info: uw.CallInfo) -> dict[str, Any]:
        result: dict[str, Any] = await perform(args.service, info.key, "hold", idempotent=True)
        return result

    async def release(payload: dict[str, Any], info: uw.CallInfo) -> Any:
        await perform(payload["args"]["service"], info.key, "release")
        return await compensate()

    hold_seat.compensator(release)

    @uw.tool(name="charge")
    async def charge(args: Order) -> dict[str, Any]:
        raise RuntimeError("card declined")

    flow: uw.Flow[Tries, Order] = uw.Flow(name, state=Tries, input=Order,
                                          tools=[hold_seat, charge])

    @flow.step
    async def book(ctx: uw.RunContext[Tries, Order]) -> Any:
        args = {"service": ctx.input.service}
        ctx.state.hold = {"args": args, "result": await ctx.call(hold_seat, args)}
        return ctx.goto(pay)

    @flow.step
    async def pay(ctx: uw.RunContext[Tries, Order]) -> Any:
        try:
            await ctx.call(charge, {"service": ctx.input.service})
        except uw.ToolCallError:
            try:
                undone = await ctx.call(hold_seat.compensation(), ctx.state.hold)
            except uw.ToolCallError as exc:
                ctx.state.tries += 1
                if ctx.state.tries < TRIES:
                    return ctx.goto(pay)
                return ctx.done({"failed": exc.error_type})
            return ctx.done({"rolled_back": undone})
        return ctx.done("paid")

    return flow


KILLED_FLOW = "hook-killed"


def killed_flow(marker: Path | None, reconcile: Any = None,
                hook_timeout: float = 600.0) -> uw.Flow[Any, Any]:
    """The SIGKILL test's flow: without ``reconcile``, a hook that creates ``marker`` and
    never answers."""

    async def stuck(key: str) -> Reconciled:
        assert marker is not None
        part = marker.with_suffix(".part")
        part.write_text(key)
        part.rename(marker)  # whole, at once: the test reads it as soon as it appears
        await asyncio.Event().wait()
        return Reconciled.unknown()

    return transfer_flow(KILLED_FLOW, after="loss", reconcile=reconcile or stuck,
                         hook_timeout=hook_timeout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--marker", required=True)
    opts = parser.parse_args()
    engine = uw.Engine(uw.connect(opts.db), flows=[killed_flow(Path(opts.marker))])
    asyncio.run(uw.Runner(engine).run_until_idle())


if __name__ == "__main__":
    main()
