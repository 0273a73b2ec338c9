"""Budget checks: a limit may be reached but not crossed, and an action that would cross
it is stopped before it runs."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest

from underway.errors import ConfigurationError
from underway.guard.budgets import Budget, Exceeded, Usage, check
from underway.journal.state import RunState

NOW = 1_717_200_000.0
ONE_CALL = Usage(tool_calls=1)


def metrics(found: list[Exceeded]) -> list[str]:
    return [e.metric for e in found]


def test_reaching_a_limit_is_allowed_crossing_it_is_not() -> None:
    budget = Budget(tool_calls=3)
    assert check(budget, Usage(tool_calls=2), now=NOW, pending=ONE_CALL) == []
    assert check(budget, Usage(tool_calls=3), now=NOW) == []
    assert check(budget, Usage(tool_calls=3), now=NOW, pending=ONE_CALL) == [
        Exceeded("tool_calls", 3.0, 4.0, "run")
    ]


def test_an_exhausted_budget_stops_actions_that_add_nothing_to_it() -> None:
    found = check(Budget(tokens=1000), Usage(tokens_in=900, tokens_out=101), now=NOW,
                  pending=ONE_CALL)
    assert found == [Exceeded("tokens", 1000.0, 1001.0, "run")]


def test_every_crossed_limit_is_reported_with_its_scope() -> None:
    budget = Budget(tokens=10, cost_usd=1.0, model_calls=2, tool_calls=5, messages=3)
    usage = Usage(tokens_in=8, tokens_out=2, cost_usd=1.0, model_calls=2, tool_calls=1,
                  messages=3)
    found = check(budget, usage, now=NOW, scope="tenant",
                  pending=Usage(tokens_in=1, model_calls=1, messages=1, cost_usd=0.01))
    assert metrics(found) == ["tokens", "cost_usd", "model_calls", "messages"]
    assert {e.scope for e in found} == {"tenant"}
    assert str(found[-1]) == "tenant budget messages: 4 would exceed the limit 3"


def test_unlimited_metrics_are_never_reported() -> None:
    huge = Usage(tokens_in=10**9, cost_usd=1e6, model_calls=10**6, tool_calls=10**6,
                 messages=10**6, money={"INR": 1e12}, started_at=0.0)
    assert check(Budget(), huge, now=NOW, pending=ONE_CALL) == []


def test_money_is_limited_per_currency() -> None:
    budget = Budget(money={"inr": Decimal("50000"), "USD": 100.0})
    spent = Usage(money={"INR": 40000.0, "USD": 99.5})
    assert budget.money == {"INR": Decimal("50000"), "USD": 100.0}
    assert check(budget, spent, now=NOW, pending=Usage(money={"INR": 10000.0})) == []
    assert check(budget, spent, now=NOW, pending=Usage(money={"INR": 10000.01})) == [
        Exceeded("money.INR", 50000.0, 50000.01, "run")
    ]
    assert metrics(check(budget, spent, now=NOW, pending=Usage(money={"USD": 0.51}))) == [
        "money.USD"
    ]
    # A currency the budget does not name has no room: paying in another currency does
    # not slip past the limits. Infinity leaves a currency unlimited on purpose.
    assert check(budget, spent, now=NOW, pending=Usage(money={"EUR": 0.01})) == [
        Exceeded("money.EUR", 0.0, 0.01, "run")
    ]
    open_eur = Budget(money={"INR": 50000, "EUR": Decimal("Infinity")})
    assert check(open_eur, spent, now=NOW, pending=Usage(money={"EUR": 1e9})) == []
    # Earlier spending in an unnamed currency does not block calls that move none.
    assert check(budget, Usage(money={"EUR": 5.0}), now=NOW, pending=Usage(tool_calls=1)) == []


def test_sums_of_fractions_may_reach_a_limit_exactly() -> None:
    budget = Budget(cost_usd=0.3, money={"USD": 0.3})
    spent = Usage(cost_usd=0.1, money={"USD": 0.1})
    pending = Usage(cost_usd=0.2, money={"USD": 0.2})
    assert check(budget, spent, now=NOW, pending=pending) == []
    assert metrics(check(budget, spent, now=NOW, pending=pending.add(
        Usage(cost_usd=0.001, money={"USD": 0.001})
    ))) == ["cost_usd", "money.USD"]


def test_wall_clock_counts_from_the_start_of_the_run() -> None:
    budget = Budget(wall_clock_s=3600)
    started = Usage(started_at=NOW - 3600)
    assert check(budget, started, now=NOW) == []
    assert check(budget, started, now=NOW + 0.5) == [
        Exceeded("wall_clock_s", 3600.0, 3600.5, "run")
    ]
    assert check(budget, Usage(), now=NOW + 10**6) == []


def test_usage_adds_up_without_changing_either_side() -> None:
    a = Usage(tokens_in=1, tokens_out=2, cost_usd=0.5, model_calls=1, tool_calls=2,
              messages=1, money={"INR": 10.0}, started_at=200.0)
    b = Usage(tokens_in=10, tool_calls=1, messages=2, money={"INR": 5.0, "USD": 1.0},
              started_at=100.0)
    total = a.add(b)
    assert total == Usage(tokens_in=11, tokens_out=2, cost_usd=0.5, model_calls=1,
                          tool_calls=3, messages=3, money={"INR": 15.0, "USD": 1.0},
                          started_at=100.0)
    assert total.tokens == 13
    assert a.money == {"INR": 10.0} and b.money == {"INR": 5.0, "USD": 1.0}
    assert Usage().add(Usage()).started_at is None


def test_usage_from_a_run_state() -> None:
    state = RunState(tenant_id="acme", run_id="r1", created_at=NOW, tool_calls=2,
                     read_calls=1, model_calls=3, tokens_in=100, tokens_out=50,
                     cost_usd=0.25, messages=2, money={"INR": 700.0})
    assert Usage.from_state(state) == Usage(
        tokens_in=100, tokens_out=50, cost_usd=0.25, model_calls=3, tool_calls=3, messages=2,
        money={"INR": 700.0}, started_at=NOW,
    )


def test_usage_from_a_state_without_message_and_money_counts() -> None:
    older: Any = SimpleNamespace(tokens_in=5, tokens_out=5, cost_usd=0.0, model_calls=1,
                                 tool_calls=4, created_at=0.0)
    assert Usage.from_state(older) == Usage(tokens_in=5, tokens_out=5, model_calls=1,
                                            tool_calls=4)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"tool_calls": -1}, "budget tool_calls must be a number of 0 or more"),
        ({"cost_usd": float("nan")}, "budget cost_usd"),
        ({"tokens": "many"}, "budget tokens"),
        ({"messages": True}, "budget messages"),
        ({"money": {"INR": -5}}, "budget money.INR"),
        ({"money": {"": 5}}, "is not a currency code"),
        ({"money": 500}, "must map currency codes"),
        ({"on_exceed": "ignore"}, "'escalate' or 'fail'"),
    ],
)
def test_bad_limits_are_refused(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match="budget") as info:
        Budget(**kwargs)
    assert words in str(info.value)
