"""A UPI collect request, followed to a settled status on durable timers.

Steps::

    collect -> (sleep) -> check -> (sleep) -> check -> ... -> done
                                       └───> settle (a person) -> done

``collect`` sends the collect request to the payer's VPA under a transaction reference
derived from the call's idempotency key, so every attempt of the call — and the
reconciliation of one whose outcome was lost — names the same transaction. The call is
never simply sent again: its intent is journaled first, and when the answer is lost (a
timeout, a reset connection, the process killed) the ``reconcile`` hook asks the PSP about
that reference. Found: the collect happened, and its answer is journaled as if it had
arrived. Not found: it is sent again, on a durable timer, with the same reference.

``check`` asks the PSP for the status on a schedule that backs off (:class:`UpiTimers`):
the first check 90 seconds after the request (NPCI asks for no earlier check), then
further apart, and one just after the collect request expires. ``SUCCESS`` and ``FAILURE``
end the run (an expired collect is a ``FAILURE``, ``U69``). ``DEEMED`` — the payer's bank
debited and the beneficiary's has not confirmed the credit — is checked every few hours
until the bank confirms or reverses it. A status still ``PENDING`` after the expiry, or ``DEEMED``
past the resolution window (a day), goes to a person (``settle``): someone in payments
operations checks with the bank and answers, with a signed decision, what happened.
"""

from __future__ import annotations

import hashlib
from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from underway import CallInfo, Flow, Reconciled, RetryPolicy, RunContext, Tool, tool
from underway.errors import ToolCallError
from underway.flow import Next

from .psp import Psp, Status, UnknownReference

OPS = "payments_ops"
"""The role whose members settle what the PSP cannot."""


class UpiTimers(BaseModel):
    """The run's timing, in minutes of ``minute`` seconds each (shrink ``minute`` to watch a
    run in seconds). The defaults follow UPI's: a collect request valid 30 minutes (UPI
    allows 1 minute to 45 days); the first status check no earlier than 90 seconds after the
    request, and few checks after it (NPCI allows three in the first two hours) — here three
    in the first half hour, the last just after the expiry; a deemed transaction checked
    every four hours for a day before a person is asked (banks settle deemed credits by the
    next day)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    minute: float = Field(default=60.0, gt=0)
    collect_expiry: int = Field(default=30, ge=1, le=64_800)
    first_check_after: float = Field(default=1.5, gt=0)
    backoff: float = Field(default=4.0, ge=1)
    max_interval: float = Field(default=30.0, gt=0)
    expiry_grace: float = Field(default=1.0, ge=0)
    deemed_check_every: float = Field(default=240.0, gt=0)
    deemed_settle_within: float = Field(default=1440.0, gt=0)


class PaymentRequest(BaseModel):
    """A collect request to make and follow."""

    model_config = ConfigDict(extra="forbid")
    order_id: str = Field(min_length=1, max_length=64)
    payer_vpa: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{1,255}@[A-Za-z][A-Za-z0-9]{1,63}$")
    amount: Decimal = Field(gt=0, max_digits=12, decimal_places=2, description="INR")
    note: str = Field(default="", max_length=50)
    timers: UpiTimers = UpiTimers()


class Seen(BaseModel):
    """One status check: when (seconds after the request) and what it said."""

    after: float
    status: Status | Literal["ERROR"]
    code: str = ""


class PaymentState(BaseModel):
    """Where the payment stands."""

    txn_ref: str | None = None
    requested_at: float | None = None
    expires_at: float | None = None
    deemed_at: float | None = None
    seen: list[Seen] = []
    settled_by: str | None = None


# -- the PSP's API as tools ----------------------------------------------------------------


class CollectArgs(BaseModel):
    """Arguments of ``upi_collect``."""

    model_config = ConfigDict(extra="forbid")
    payer_vpa: str
    amount: Decimal
    note: str
    expiry_minutes: int


class Collect(BaseModel):
    """The PSP's answer to a collect request."""

    txn_ref: str
    status: Status
    expires_at: float


class StatusArgs(BaseModel):
    """Arguments of ``upi_status``."""

    model_config = ConfigDict(extra="forbid")
    txn_ref: str


class TxnStatus(BaseModel):
    """A transaction's status at the PSP."""

    txn_ref: str
    status: Status
    code: str
    reason: str
    rrn: str


def txn_ref_of(key: str) -> str:
    """The merchant's transaction reference of the collect call with idempotency key
    ``key``: the same for every attempt and for reconciliation (35 characters at most, as
    UPI allows)."""
    return "UW" + hashlib.sha256(key.encode()).hexdigest()[:30].upper()


def make_tools(psp: Psp) -> list[Tool]:
    """The PSP's API as the flow's tools."""

    async def collect_by_reference(key: str, info: CallInfo) -> Reconciled:
        # Asked when a collect's outcome is unknown: did the PSP accept this reference?
        # The query's fence makes the PSP refuse the attempt in doubt should it arrive now.
        try:
            found = psp.lookup(txn_ref_of(key), fence=info.fence)
        except OSError:
            return Reconciled.unknown()
        return Reconciled.not_happened() if found is None else Reconciled.happened(found)

    @tool(idempotent=False, reconcile=collect_by_reference, timeout=15,
          retry=RetryPolicy(max_attempts=3, initial_interval=30, max_interval=120),
          amount="amount", currency="INR", money_direction="in")
    def upi_collect(args: CollectArgs, info: CallInfo) -> Collect:
        """Send a collect request to the payer's VPA."""
        return Collect.model_validate(psp.collect(
            txn_ref_of(info.key), args.payer_vpa, args.amount, args.note,
            args.expiry_minutes, fence=info.fence))

    @tool(read_only=True, timeout=10)
    def upi_status(args: StatusArgs) -> TxnStatus:
        """The status of a transaction at the PSP, by reference."""
        return TxnStatus.model_validate(psp.status(args.txn_ref))

    return [upi_collect, upi_status]


# -- the flow -------------------------------------------------------------------------------

upi_payment: Flow[PaymentState, PaymentRequest] = Flow(
    "upi_payment", state=PaymentState, input=PaymentRequest,
    tools=["upi_collect", "upi_status"],
)
Ctx = RunContext[PaymentState, PaymentRequest]


@upi_payment.step(start=True)
async def collect(ctx: Ctx) -> Next:
    """Send the collect request, then wait for the first status check."""
    t = ctx.input.timers
    ctx.state.requested_at = ctx.now().timestamp()
    ctx.state.expires_at = ctx.state.requested_at + t.collect_expiry * t.minute
    sent = Collect.model_validate(await ctx.call("upi_collect", CollectArgs(
        payer_vpa=ctx.input.payer_vpa, amount=ctx.input.amount,
        note=ctx.input.note or ctx.input.order_id, expiry_minutes=t.collect_expiry)))
    ctx.state.txn_ref = sent.txn_ref
    return ctx.sleep(t.first_check_after * t.minute, then=check)


@upi_payment.step
async def check(ctx: Ctx) -> Next:
    """Ask the PSP; finish, or wait for the next check, or hand over to a person."""
    t, s = ctx.input.timers, ctx.state
    now = ctx.now().timestamp()
    assert s.txn_ref is not None and s.requested_at is not None and s.expires_at is not None
    after = round(now - s.requested_at, 3)
    try:
        got = TxnStatus.model_validate(
            await ctx.call("upi_status", StatusArgs(txn_ref=s.txn_ref)))
    except ToolCallError as exc:
        if exc.error_type == UnknownReference.__name__:
            raise  # the PSP lost a transaction it accepted: stop for an operator
        s.seen.append(Seen(after=after, status="ERROR", code=exc.error_type))
        return ctx.sleep(_next_pending_check(t, s, now), then=check)
    s.seen.append(Seen(after=after, status=got.status, code=got.code))
    if got.status in ("SUCCESS", "FAILURE"):
        return ctx.done(_result(s, got.status, got.code, got.reason, got.rrn))
    if got.status == "DEEMED":
        if s.deemed_at is None:
            s.deemed_at = now
        if now - s.deemed_at >= t.deemed_settle_within * t.minute:
            return ctx.goto(settle)
        return ctx.sleep(t.deemed_check_every * t.minute, then=check)
    if now >= s.expires_at + t.expiry_grace * t.minute:
        return ctx.goto(settle)  # still PENDING after the collect expired
    return ctx.sleep(_next_pending_check(t, s, now), then=check)


@upi_payment.step
async def settle(ctx: Ctx) -> Next:
    """A person checks with the bank and says what happened; the run ends with that."""
    s = ctx.state
    last = s.seen[-1]
    why = ("is still DEEMED: the beneficiary bank has not confirmed the credit"
           if last.status == "DEEMED" else "is still PENDING after the collect expired")
    answer = await ctx.ask(
        f"UPI transaction {s.txn_ref} for order {ctx.input.order_id} ({ctx.input.amount} INR "
        f"from {ctx.input.payer_vpa}) {why}. Check with the bank and answer "
        '{"status": "SUCCESS" | "FAILURE", "rrn": "...", "note": "..."}.',
        context={"txn_ref": s.txn_ref, "order_id": ctx.input.order_id,
                 "amount": str(ctx.input.amount), "payer_vpa": ctx.input.payer_vpa,
                 "checks": [c.model_dump(mode="json") for c in s.seen]},
        role=OPS,
    )
    settled = answer if isinstance(answer, dict) else {}
    status = settled.get("status")
    if status not in ("SUCCESS", "FAILURE"):
        return ctx.goto(settle)  # not an answer this run can act on: ask again
    s.settled_by = "payments_ops"
    return ctx.done(_result(s, status, "", str(settled.get("note", "")),
                            str(settled.get("rrn", ""))))


def _next_pending_check(t: UpiTimers, s: PaymentState, now: float) -> float:
    """Seconds to the next check of a PENDING transaction: backing off from the first
    interval, never past the last check just after the expiry."""
    assert s.expires_at is not None
    n = len(s.seen)
    wait = min(t.first_check_after * t.backoff ** n, t.max_interval) * t.minute
    last = s.expires_at + t.expiry_grace * t.minute
    return max(min(wait, last - now), 0.0)


def _result(s: PaymentState, status: str, code: str, reason: str, rrn: str) -> dict[str, Any]:
    return {"status": status, "code": code, "reason": reason, "txn_ref": s.txn_ref,
            "rrn": rrn, "checks": len(s.seen), "deemed": s.deemed_at is not None,
            "settled_by": s.settled_by}
