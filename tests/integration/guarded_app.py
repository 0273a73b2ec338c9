"""What the worker-options test runs: ``underway worker --app guarded_app:app`` (from this
folder). One step looks something up with a secret (returning only its length), tries a
mutating call a policy may deny, then asks a person."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from underway import CallInfo, Flow, RunContext, ToolCallError, tool
from underway.flow import Next


class Seen(BaseModel):
    """What the step learned before it asked."""

    token_length: int = 0
    refused: str = ""


@tool(read_only=True, secrets=("ERP_TOKEN",))
async def erp_lookup(args: Any, info: CallInfo) -> dict[str, Any]:
    """Reads the ERP with a token from the secret provider."""
    return {"token_length": len(info.secrets["ERP_TOKEN"])}


@tool(mutating=True, idempotent=True)
async def send_notice(args: Any, info: CallInfo) -> dict[str, Any]:
    """Would message a customer."""
    return {"sent": True}


guarded: Flow[Seen, Any] = Flow("guarded", state=Seen, tools=[erp_lookup, send_notice])


@guarded.step
async def work(ctx: RunContext[Seen, Any]) -> Next:
    found = await ctx.call(erp_lookup, {})
    ctx.state.token_length = int(found["token_length"])
    try:
        await ctx.call(send_notice, {"to": "customer"})
    except ToolCallError as exc:
        ctx.state.refused = exc.error_type
    answer = await ctx.ask("Carry on?")
    return ctx.done({"answer": answer})


app: list[Any] = [guarded]
