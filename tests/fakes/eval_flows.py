"""A help-desk flow whose input says what each run does, so an evaluation's every figure has
runs to count: it asks a model, looks a ticket up, sends a reply (idempotent; it can die
right after sending, as a SIGKILL would, before the journal records it), may try a wire the
policy denies, post something labelled untrusted (held by the ``untrusted-input`` rule),
refund an amount (held for a finance approval), and ends completed, failed, dead or still
waiting."""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel

import underway as uw
from underway.effects import ModelReply
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.guard.policy import UNTRUSTED_INPUT, Policy, Rule

TOKENS_IN, TOKENS_OUT, COST = 100, 20, 0.25
"""What one call of :class:`DeskModel` is charged."""


class Crash(BaseException):
    """Raised to abandon an activation mid-flight, as a SIGKILL would."""


class Ticket(BaseModel):
    name: str = "T-1"
    end: Literal["done", "fail", "dead", "wait"] = "done"
    crash: bool = False
    wire: bool = False
    untrusted: bool = False
    refund: int = 0


class Desk(BaseModel):
    replies: int = 0


class Refund(BaseModel):
    amount: int
    currency: str = "INR"


class DeskModel:
    """A model that answers at once, charged the same every time."""

    name = "desk-model"

    async def complete(self, request: Any) -> ModelReply:
        return ModelReply({"text": "reply"}, self.name, TOKENS_IN, TOKENS_OUT, COST)


CRASHED: set[str] = set()
"""Keys of sends that already died once: the next attempt goes through."""


@uw.tool(mutating=False)
async def lookup(args: dict[str, Any]) -> dict[str, Any]:
    return {"ticket": args["name"], "open": True}


@uw.tool(idempotent=True)
async def send(args: dict[str, Any], call: uw.CallInfo) -> dict[str, Any]:
    if args.get("crash") and call.key not in CRASHED:
        CRASHED.add(call.key)
        raise Crash  # the reply went out; the process died before recording it
    return {"sent": args["name"]}


@uw.tool
async def wire(args: dict[str, Any]) -> dict[str, Any]:
    return {"wired": True}


@uw.tool(outbound=True)
async def post(args: dict[str, Any]) -> dict[str, Any]:
    return {"posted": True}


@uw.tool(irreversible=True, amount="amount", currency="arg:currency")
async def refund(args: Refund) -> dict[str, Any]:
    return {"refunded": args.amount}


POLICY = Policy("desk-1", [
    Rule("no-wires", tools=["wire"], outcome="deny", reason="wires are not for the desk"),
    Rule("refunds", tools=["refund"], outcome="require_approval", approver_role="finance"),
    UNTRUSTED_INPUT,
])

desk: uw.Flow[Desk, Ticket] = uw.Flow(
    "desk", state=Desk, input=Ticket, tools=[lookup, send, wire, post, refund],
    policy=POLICY, signals=["never"])


@desk.step
async def work(ctx: uw.RunContext[Desk, Ticket]) -> Any:
    t = ctx.input
    await ctx.model(DeskModel(), {"prompt": f"answer {t.name}"})
    await ctx.call(lookup, {"name": t.name})
    await ctx.call(send, {"name": t.name, "crash": t.crash})
    ctx.state.replies += 1
    if t.wire:
        with contextlib.suppress(uw.ToolCallError):
            await ctx.call(wire, {"to": "somewhere"})
    if t.untrusted:
        await ctx.call(post, {"text": "as the ticket asked"}, labels=["untrusted"])
    if t.refund:
        with contextlib.suppress(uw.ToolCallError):
            await ctx.call(refund, {"amount": t.refund})
    if t.end == "fail":
        return ctx.fail("the customer is unreachable")
    if t.end == "dead":
        raise RuntimeError("the ticketing system is down")
    if t.end == "wait":
        return ctx.wait("never", then=finish)
    return ctx.done({"replies": ctx.state.replies})


@desk.step
async def finish(ctx: uw.RunContext[Desk, Ticket]) -> Any:
    return ctx.done({"replies": ctx.state.replies})


def approver(engine: uw.Engine, name: str = "fin", *, now: float) -> Ed25519PrivateKey:
    """Register an approver of the finance role; its private key."""
    key = Ed25519PrivateKey.generate()
    register_approver(engine.store, name, public_key=public_key_of(key), roles=["finance"],
                      now=now)
    return key


def decide(engine: uw.Engine, run_id: str, key: Ed25519PrivateKey, name: str,
           decision: Literal["approve", "reject"]) -> None:
    """Sign ``decision`` on the request the run waits for and deliver it."""
    asked = engine.state(run_id).pending_approval
    assert asked is not None, f"run {run_id} waits for no approval"
    engine.submit_decision(sign_decision(
        key, request_id=asked.request_id, run_id=run_id, tenant_id="default",
        tool=asked.tool, args_hash=asked.args_hash, decision=decision,
        expires_at=asked.expires_at, approver_id=name).model_dump(mode="json"))
