"""An agent whose tools come from two MCP servers: the warehouse (stdio, run inside the
sandbox) and the shipping company (Streamable HTTP, reached only at the host it is allowed).

The agent's model is a small rule book (a :class:`~underway.testing.RuleModel`), so the
example runs without a model provider: check the stock, reserve it, get a quote, book the
courier, finish. Every one of those calls is a tool call through ``ctx.call``: the guard
checks it against the server's JSON Schema and the policy, and the journal records it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import mcp

import underway as uw
import underway.mcp as uw_mcp
from underway.models import ModelRequest, ModelResponse
from underway.sandbox import Limits, SandboxProfile
from underway.testing import RuleModel, say

HERE = Path(__file__).resolve().parent
SITE = str(Path(mcp.__file__).resolve().parents[1])
"""Where the MCP SDK is installed: shown read-only in the sandbox, so the server imports it."""
PYTHON = os.path.realpath(sys.base_prefix) + "/bin/python3"
"""The interpreter the sandbox shows (``python=True`` shows its prefix)."""
ORDER = {"order": "ORD-7", "sku": "TEA-1", "qty": 2, "city": "Pune"}


def warehouse(data: Path) -> uw_mcp.Stdio:
    """The warehouse server, in the sandbox: no network, its ledger in its workspace."""
    workspace = data / "warehouse"
    workspace.mkdir(parents=True, exist_ok=True)
    profile = SandboxProfile(backend="bwrap", python=True, ro_paths=[SITE, str(HERE)],
                             limits=Limits(timeout_s=600, memory_mb=2048))
    return uw_mcp.Stdio(command=[PYTHON, str(HERE / "warehouse.py"), "/workspace"],
                        profile=profile, env={"PYTHONPATH": SITE},
                        workspace=str(workspace), name="warehouse")


def shipping(url: str) -> uw_mcp.HTTP:
    """The shipping server, reached only at 127.0.0.1."""
    return uw_mcp.HTTP(url=url, hosts=["127.0.0.1"], name="shipping")


def brain(req: ModelRequest) -> ModelResponse:
    """The agent's rule book: one step of the order after another."""
    told = [m for m in req.messages if m.role == "tool"]
    o = ORDER
    steps: list[tuple[str, Any]] = [
        ("warehouse_stock", {"sku": o["sku"]}),
        ("warehouse_reserve", {"order": o["order"], "sku": o["sku"], "qty": o["qty"]}),
        ("shipping_quote", {"city": o["city"], "weight_kg": 1.5}),
        ("shipping_book_courier", {"order": o["order"], "city": o["city"]}),
    ]
    if len(told) < len(steps):
        return say(None, steps[len(told)])
    return say("Reserved and booked.", ("finish", {"result": {"order": o["order"]}}))


async def toolsets(data: Path, shipping_url: str) -> tuple[uw_mcp.Toolset, uw_mcp.Toolset]:
    """Both servers' tools, loaded; the courier booking reconciled with the shipper."""
    # Both servers are our own: we vouch for what they return (a server's own hints never
    # make its output trusted), so the courier booking that follows needs no person.
    mine = {"trusted_output": True}
    store = await uw_mcp.Toolset(warehouse(data), prefix="warehouse_",
                                 overrides={"stock": mine, "reserve": mine}).load()
    ship = await uw_mcp.Toolset(shipping(shipping_url), prefix="shipping_",
                                include=["quote", "book_courier", "find_booking"],
                                overrides={"quote": mine}).load()

    @ship.tool("book_courier").reconciler
    async def was_booked(key: str) -> uw.Reconciled:
        """Ask the shipper whether a booking was made under ``key``."""
        found = await ship.query("find_booking", {"key": key})
        assert isinstance(found, dict)
        if found["booked"]:
            return uw.Reconciled.happened(found["booking"])
        return uw.Reconciled.not_happened()

    return store, ship


def agent(store: uw_mcp.Toolset, ship: uw_mcp.Toolset) -> uw.Agent:
    """The order agent, with the tools of both servers (but not ``find_booking``, which
    only the reconcile hook asks)."""
    tools = [*store.tools, ship.tool("quote"), ship.tool("book_courier")]
    return uw.Agent("mcp_order_agent", model=RuleModel(brain), tools=tools, plan=False)
