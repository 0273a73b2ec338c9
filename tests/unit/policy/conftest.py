"""What the policy tests share: describing a tool call as a policy sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

import pytest

from underway.guard.policy import Amount, PolicyContext

MakeContext = Callable[..., PolicyContext]

TOOLS: dict[str, dict[str, Any]] = {
    "lookup_invoice": {"mutating": False, "irreversible": False, "labels": ()},
    "send_reminder": {"mutating": True, "irreversible": False, "labels": ()},
    "issue_refund": {"mutating": True, "irreversible": True, "labels": ()},
    "delete_customer_data": {"mutating": True, "irreversible": True, "labels": ("personal",)},
}
"""The invoice agent's tools, with the flags and input labels they declare."""


def _context(
    tool: str = "lookup_invoice",
    *,
    role: str | None = "agent",
    roles: Iterable[str] | None = None,
    environment: str = "prod",
    amount: tuple[str | int, str] | None = None,
    args: Mapping[str, Any] | None = None,
    labels: Iterable[str] = (),
    counters: Mapping[str, float] | None = None,
    tenant_id: str = "acme",
    principal: str | None = "user-1",
    flow: str = "invoice_followup",
    permissions: Iterable[str] = (),
    mutating: bool | None = None,
    irreversible: bool | None = None,
) -> PolicyContext:
    spec = TOOLS.get(tool, {"mutating": True, "irreversible": False, "labels": ()})
    return PolicyContext(
        tenant_id=tenant_id,
        principal=principal,
        roles=frozenset(roles if roles is not None else [role] if role else []),
        environment=environment,
        flow=flow,
        tool=tool,
        mutating=spec["mutating"] if mutating is None else mutating,
        irreversible=spec["irreversible"] if irreversible is None else irreversible,
        permissions=frozenset(permissions),
        args=dict(args or {}),
        labels=frozenset(spec["labels"]) | frozenset(labels),
        amount=Amount(Decimal(str(amount[0])), amount[1]) if amount else None,
        counters=dict(counters or {}),
    )


@pytest.fixture
def make_ctx() -> MakeContext:
    """Build a :class:`PolicyContext` for one call of the invoice agent's tools."""
    return _context
