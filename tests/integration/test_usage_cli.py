"""``underway usage`` reports a tenant's spending from the journal."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import underway as uw
from underway.testing import ScriptedModel


class S(BaseModel):
    pass


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("underway")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_usage_sums_model_cost_calls_messages_and_money(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/u.db"
    model = ScriptedModel([{"a": 1}, {"b": 2}], cost_per_token=0.001)

    @uw.tool(message=True, idempotent=True)
    async def notify(args: Any) -> Any:
        return None

    @uw.tool(amount="amount", currency="INR")
    async def pay(args: Any) -> Any:
        return None

    flow = uw.Flow("spend", state=S)

    @flow.step
    async def go(ctx: uw.RunContext[S, Any]) -> Any:
        await ctx.model(model, {"q": 1})
        await ctx.model(model, {"q": 2})
        await ctx.call(notify, {"to": "a"})
        await ctx.call(pay, {"amount": 1500.5})
        return ctx.done()

    engine = uw.Engine(uw.connect(url), flows=[flow], tools=[notify, pay])
    state = asyncio.run(uw.run(engine, flow, tenant_id="acme"))
    out = cli("--db", url, "usage", "--tenant", "acme", "--days", "1", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["model_calls"] == 2 and report["tool_calls"] == 2
    assert report["messages"] == 1 and report["money"] == {"INR": 1500.5}
    assert abs(report["cost_usd"] - state.cost_usd) < 1e-9 and state.cost_usd > 0
    other = json.loads(cli("--db", url, "usage", "--tenant", "globex", "--json").stdout)
    assert other["model_calls"] == 0
    bad = cli("--db", url, "usage", "--since", "yesterday")
    assert bad.returncode == 2 and "ISO 8601" in bad.stderr
