"""A KYC flow whose tools carry canaries in sensitive fields, for the redaction tests: a
read-only lookup takes a PAN and returns a phone number (both ``sensitive``), a check
fails with an error that quotes the PAN, a lookup with a malformed PAN fails validation
(the error quotes it), and an SMS held for a signed approval takes the phone and an API
token typed ``SecretStr`` (a secret), with the PAN as evidence. The flow copies the phone
into its state and its result under other names, so values are hidden wherever they go.
``kyc`` with ``fail`` fails the run on the quoting error instead."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SecretStr

import underway as uw
from underway import ToolCallError
from underway.guard.policy import policy_from_dict

PAN = "ABCPE1234Z"
"""A PAN-like canary (sensitive)."""
BAD_PAN = "QQPAN00000X"
"""A malformed PAN the lookup refuses in validation (sensitive)."""
PHONE = "+919876543210"
"""A phone-like canary a tool returns (sensitive)."""
TOKEN = "tok-SECRET-4f1c9a77"
"""A secret: typed SecretStr in the SMS tool's arguments; never shown, even revealed."""
SENSITIVE = (PAN, BAD_PAN, PHONE)
CANARIES = (*SENSITIVE, TOKEN)


class Lookup(BaseModel):
    customer: str
    pan: str = Field(pattern=r"^[A-Z]{5}[0-9]{4}[A-Z]$")


class Found(BaseModel):
    name: str
    phone: str


@uw.tool(read_only=True, sensitive=("pan", "phone"))
async def lookup_customer(args: Lookup) -> Found:
    """Find a customer by PAN."""
    return Found(name="Asha", phone=PHONE)


@uw.tool(read_only=True, sensitive=("pan",))
async def verify_pan(args: dict[str, Any]) -> dict[str, Any]:
    """Check a PAN (this one always fails, quoting it)."""
    raise ValueError(f"PAN {args['pan']} failed the checksum")


class Sms(BaseModel):
    phone: str
    message: str
    api_token: SecretStr


@uw.tool(irreversible=True, sensitive=("phone",))
async def send_sms(args: Sms) -> dict[str, Any]:
    """Send a text message."""
    return {"message_id": "m-1", "phone": args.phone}


class KycInput(BaseModel):
    customer: str = "C1"
    fail: bool = False


class Kyc(BaseModel):
    phone: str = ""
    note: str = ""
    invalid: str = ""


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "sms", "tools": ["send_sms"], "outcome": "require_approval",
     "approver_role": "ops", "expires_in": 3600},
]})

kyc: uw.Flow[Kyc, KycInput] = uw.Flow(
    "kyc", state=Kyc, input=KycInput, policy=POLICY,
    tools=[lookup_customer, verify_pan, send_sms])


@kyc.step
async def check(ctx: uw.RunContext[Kyc, KycInput]) -> Any:
    found = await ctx.call(lookup_customer, {"customer": ctx.input.customer, "pan": PAN})
    ctx.state.phone = found.phone
    if ctx.input.fail:
        await ctx.call(verify_pan, {"pan": PAN})
    try:
        await ctx.call(verify_pan, {"pan": PAN})
    except ToolCallError as exc:
        ctx.state.note = exc.message
    try:
        await ctx.call(lookup_customer, {"customer": "C2", "pan": BAD_PAN})
    except ToolCallError as exc:
        ctx.state.invalid = exc.message
    return ctx.goto(notify)


@kyc.step
async def notify(ctx: uw.RunContext[Kyc, KycInput]) -> Any:
    sent = await ctx.call(
        send_sms, {"phone": ctx.state.phone, "message": "KYC done", "api_token": TOKEN},
        evidence={"pan": PAN, "why": "KYC complete"}, risks=["texts a customer"])
    return ctx.done({"sent": sent["message_id"], "to": sent["phone"]})


def leaks(text: str, canaries: tuple[str, ...] = CANARIES) -> list[str]:
    """The canaries found in ``text``."""
    return [c for c in canaries if c in text]
