"""The router: which adapter answers which kind, and budgets read from journaled events."""

from __future__ import annotations

import asyncio

import pytest

from underway.errors import ConfigurationError
from underway.models import (
    Message,
    ModelRequest,
    ModelRouter,
    RouteBudget,
    RouteUsage,
    budget_breaches,
    route_usage,
)
from underway.testing import ScriptedModel


def request(kind: str) -> dict[str, object]:
    data = ModelRequest(messages=[Message.user("x")], kind=kind).to_json()
    assert isinstance(data, dict)
    return data


def responded(kind: str | None, tokens_in: int, tokens_out: int, cost: float) -> dict[str, object]:
    """A ModelResponded event as the journal stores it."""
    req: dict[str, object] = {"messages": [{"role": "user", "content": "x"}]}
    if kind is not None:
        req["kind"] = kind
    return {"type": "ModelResponded", "key": "k", "index": 0, "model": "m", "request": req,
            "response": {}, "tokens_in": tokens_in, "tokens_out": tokens_out,
            "cost_usd": cost, "latency_ms": 5.0}


def make_router(**budgets: RouteBudget) -> tuple[ModelRouter, ScriptedModel, ScriptedModel]:
    small = ScriptedModel(["s1", "s2", "s3"], name="small")
    large = ScriptedModel(["l1", "l2"], name="large")
    router = ModelRouter([small, large], {"classify": "small", "extract": "small",
                                          "plan": "large"},
                         default="large", budgets=budgets)
    return router, small, large


def test_requests_go_to_the_adapter_their_kind_names() -> None:
    router, small, _ = make_router()

    async def go() -> list[object]:
        return [(await router.complete(request(k))).response
                for k in ("classify", "extract", "plan", "summarise")]

    assert asyncio.run(go()) == ["s1", "s2", "l1", "l2"]
    assert [r["kind"] for r in small.requests] == ["classify", "extract"]  # type: ignore[index]
    assert router.route("summarise") == "default"


def test_bad_routes_are_refused_when_the_router_is_built() -> None:
    small = ScriptedModel([], name="small")
    with pytest.raises(ConfigurationError, match=r"names adapter 'huge'.*one of: small"):
        ModelRouter([small], {"plan": "huge"}, default="small")
    with pytest.raises(ConfigurationError, match="route 'default' names adapter 'large'"):
        ModelRouter([small], {}, default="large")
    with pytest.raises(ConfigurationError, match="two adapters are named 'small'"):
        ModelRouter([small, ScriptedModel([], name="small")], {}, default="small")
    with pytest.raises(ConfigurationError, match="budgets for unknown routes 'plan'"):
        ModelRouter([small], {}, default="small", budgets={"plan": RouteBudget(max_calls=1)})
    with pytest.raises(ConfigurationError, match="must not be negative"):
        RouteBudget(max_tokens=-1)


def test_usage_is_totalled_per_route_from_journaled_events() -> None:
    router, _, _ = make_router()
    events = [
        responded("classify", 10, 1, 0.001),
        responded("extract", 20, 2, 0.002),
        responded("plan", 300, 40, 0.05),
        responded(None, 5, 5, 0.0),        # no kind: the default route
        responded("summarise", 7, 3, 0.0),  # a kind without a route: the default route
        {"type": "StepCompleted", "next": "x"},
    ]
    usage = router.usage(events)
    assert usage["classify"] == RouteUsage(1, 10, 1, 0.001)
    assert usage["plan"].tokens == 340
    assert usage["default"] == RouteUsage(2, 12, 8, 0.0)
    # A journal entry may carry its route outright.
    assert route_usage([{**responded("plan", 1, 1, 0.0), "route": "special"}]) == {
        "special": RouteUsage(1, 1, 1, 0.0)}


def test_a_route_reaching_a_limit_takes_no_further_calls() -> None:
    router, _, _ = make_router(
        plan=RouteBudget(max_calls=2, max_cost_usd=0.3),
        default=RouteBudget(max_tokens=100),
    )
    one_plan = [responded("plan", 100, 10, 0.1)]
    assert router.breaches(one_plan, "plan") == []

    costly = [responded("plan", 100, 10, 0.1), responded("plan", 100, 10, 0.2)]
    found = sorted((b.limit, round(b.used, 9)) for b in router.breaches(costly, "plan"))
    assert found == [("calls", 2), ("cost_usd", 0.3)]
    # Another kind on another route is not held back by the plan route's budget.
    assert router.breaches(costly, "classify") == []
    assert [b.limit for b in router.breaches([responded(None, 60, 40, 0)], "anything")] == [
        "tokens"]


def test_budget_breaches_is_a_pure_function_of_usage() -> None:
    usage = {"plan": RouteUsage(calls=3, tokens_in=10, tokens_out=0, cost_usd=0.0)}
    budgets = {"plan": RouteBudget(max_calls=3), "classify": RouteBudget(max_calls=0)}
    assert [(b.route, b.limit) for b in budget_breaches(usage, budgets)] == [
        ("plan", "calls"), ("classify", "calls")]
