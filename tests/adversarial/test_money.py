"""Money is counted honestly: no amount rule, money budget or usage count is skipped
because an amount or currency is missing, defaulted, negative, NaN, infinite, a string or
a boolean. Each attack runs through a real engine on SQLite and PostgreSQL, against
policy amount rules, money budgets (run and tenant) and the usage journaled with calls,
and through ``underway policy explain``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import money_tools as mt
import pytest
from typer.testing import CliRunner

import underway as uw
from underway import events as ev
from underway.agent import Agent
from underway.cli import app
from underway.guard.budgets import Budget, tenant_usage
from underway.guard.policy import Policy, policy_from_dict
from underway.models.types import ModelRequest
from underway.money import MAX_AMOUNT, Money, Unreadable, read_money
from underway.runner import Runner
from underway.testing import RuleModel, say

POLICY = policy_from_dict({"version": "money-1", "rules": [
    {"id": "big-refunds", "outcome": "require_approval", "approver_role": "finance",
     "amount": {"op": ">", "value": "10000", "currency": "INR"}},
]})

BUDGET = Budget(money={"INR": 50_000}, on_exceed="fail")

# What a model can put where a tool declares its amount, and what the guard must refuse.
# (tool, arguments, the argument the refusal names)
UNREADABLE: list[tuple[str, dict[str, Any], str]] = [
    ("issue_refund", {"amount": "nan"}, "amount"),
    ("issue_refund", {"amount": "inf"}, "amount"),
    ("issue_refund", {"amount": "-inf"}, "amount"),
    ("issue_refund", {"amount": "1e400"}, "amount"),
    ("issue_refund", {"amount": True}, "amount"),
    ("issue_refund", {"amount": 1e16}, "amount"),
    # Full-width look-alikes of INR, which str.upper() leaves as they are.
    ("issue_refund", {"amount": 500, "currency": "\uff29\uff2e\uff32"}, "currency"),
    ("issue_refund", {"amount": 500, "currency": ""}, "currency"),
    ("transfer", {"amount": "25000", "currency": "INR"}, "amount"),
    ("transfer", {"amount": "nan", "currency": "INR"}, "amount"),
    ("transfer", {"amount": True, "currency": "INR"}, "amount"),
    ("transfer", {"amount": None, "currency": "INR"}, "amount"),
    ("transfer", {"currency": "INR"}, "amount"),
    ("transfer", {"amount": [25000], "currency": "INR"}, "amount"),
    ("transfer", {"amount": 25000}, "currency"),
    ("transfer", {"amount": 25000, "currency": None}, "currency"),
    ("transfer", {"amount": 25000, "currency": 356}, "currency"),
    ("transfer", {"amount": 10**400, "currency": "INR"}, "amount"),
    ("payout", {"amount": -1}, "amount"),
    ("payout", {"amount": "-0.01"}, "amount"),
]


@pytest.fixture
def engine(db_url: str) -> Iterator[uw.Engine]:
    mt.executed.clear()
    store = uw.connect(db_url)
    eng = uw.Engine(store, flows=[mt.calls])
    eng.guard.tenant_usage_ttl = 0.0
    yield eng
    store.close()


def start(engine: uw.Engine, *calls: tuple[str, Any]) -> str:
    run_id, _ = engine.start(mt.calls, {"calls": [list(c) for c in calls]})
    return run_id


def drive(engine: uw.Engine, run_id: str) -> uw.RunState:
    asyncio.run(Runner(engine).run_until_idle())
    return engine.state(run_id)


def of_type(engine: uw.Engine, run_id: str, cls: type[ev.Event]) -> list[Any]:
    return [r.event for r in engine.journal.history("default", run_id)
            if isinstance(r.event, cls)]


# -- a negative amount does not offset a budget ------------------------------------------


def test_a_negative_amount_does_not_offset_the_run_budget(engine: uw.Engine) -> None:
    engine.guard.budget = BUDGET
    run_id = start(engine, ("issue_refund", {"amount": -40_000}),
                   *[("issue_refund", {"amount": 10_000})] * 6)
    s = drive(engine, run_id)
    # 40,000 moved back plus 10,000 out reach the limit; the next 10,000 would cross it.
    assert mt.executed == [("issue_refund", -40_000.0), ("issue_refund", 10_000.0)]
    assert s.status == "failed" and s.money == {"INR": 50_000.0}
    (exceeded,) = of_type(engine, run_id, ev.BudgetExceeded)
    assert (exceeded.metric, exceeded.used, exceeded.limit) == ("money.INR", 60_000, 50_000)
    succeeded = of_type(engine, run_id, ev.ToolSucceeded)
    assert [e.counts for e in succeeded] == [{"money.INR": 40_000.0}, {"money.INR": 10_000.0}]


def test_a_negative_amount_does_not_offset_the_tenant_budget(engine: uw.Engine) -> None:
    engine.guard.tenant_budget = BUDGET
    first = drive(engine, start(engine, ("issue_refund", {"amount": -40_000})))
    assert first.status == "completed"
    outcomes = [drive(engine, start(engine, ("issue_refund", {"amount": 10_000}))).status
                for _ in range(6)]
    assert outcomes == ["completed"] + ["failed"] * 5
    assert len(mt.executed) == 2
    assert tenant_usage(engine.store, "default", since=0).money == {"INR": 50_000.0}


def test_negative_amounts_meet_amount_rules_by_their_size(engine: uw.Engine) -> None:
    engine.guard.policy = POLICY
    run_id = start(engine, ("issue_refund", {"amount": -25_000}))
    s = drive(engine, run_id)
    assert s.status == "waiting" and s.pending_approval is not None
    assert of_type(engine, run_id, ev.PolicyDecided)[0].rule_id == "big-refunds"
    assert mt.executed == []


def test_a_tool_that_only_pays_out_refuses_a_negative_amount_and_counts_negative_zero(
    engine: uw.Engine,
) -> None:
    engine.guard.budget = BUDGET
    run_id = start(engine, ("payout", {"amount": "-0"}), ("payout", {"amount": "-40000"}),
                   ("payout", {"amount": "50000"}))
    s = drive(engine, run_id)
    assert s.result[0] == "ran" and s.result[2] == "ran"
    assert s.result[1][0] == "PolicyDenied"
    assert "argument 'amount' is -40000, negative, but tool 'payout' only moves money out" in (
        s.result[1][1]
    )
    assert [a for _, a in mt.executed] == [Decimal("-0"), Decimal("50000")]
    assert s.money == {"INR": 50_000.0}


# -- a defaulted or fixed currency counts ------------------------------------------------


def test_a_defaulted_currency_meets_amount_rules_budgets_and_usage(engine: uw.Engine) -> None:
    engine.guard.policy = POLICY
    held = start(engine, ("issue_refund", {"amount": 25_000}))
    assert drive(engine, held).status == "waiting"
    readme = start(engine, ("readme_refund", {"amount": 25_000}))
    assert drive(engine, readme).status == "waiting"
    assert mt.executed == []

    engine.guard.policy = None
    engine.guard.budget = Budget(money={"INR": 20_000}, on_exceed="fail")
    over = start(engine, ("issue_refund", {"amount": 25_000}))
    assert drive(engine, over).status == "failed"
    assert of_type(engine, over, ev.BudgetExceeded)[0].metric == "money.INR"

    engine.guard.budget = None
    counted = start(engine, ("issue_refund", {"amount": "5000"}),
                    ("readme_refund", {"amount": 700}))
    s = drive(engine, counted)
    assert s.status == "completed" and s.money == {"INR": 5_700.0}


def test_a_currency_the_budget_does_not_name_has_no_room(engine: uw.Engine) -> None:
    engine.guard.budget = BUDGET
    run_id = start(engine, ("issue_refund", {"amount": 1, "currency": "usd"}))
    s = drive(engine, run_id)
    assert s.status == "failed" and mt.executed == []
    assert of_type(engine, run_id, ev.BudgetExceeded)[0].metric == "money.USD"


# -- a value the guard cannot read is a journaled deny, whatever else is configured -------


@pytest.mark.parametrize("guarded_by", ["policy", "budget", "tenant_budget", "nothing"])
def test_every_unreadable_amount_or_currency_is_a_journaled_deny(
    engine: uw.Engine, guarded_by: str
) -> None:
    if guarded_by == "policy":
        engine.guard.policy = Policy("allow-all", default="allow")
    elif guarded_by != "nothing":
        setattr(engine.guard, guarded_by, Budget(money={"INR": 10**15}))
    run_id = start(engine, *[(tool, args) for tool, args, _ in UNREADABLE])
    s = drive(engine, run_id)
    # Decided in one pass: the step ran once and every refusal reached it as an error.
    assert s.status == "completed" and len(of_type(engine, run_id, ev.StepStarted)) == 1
    assert mt.executed == [] and s.money == {}
    refused = of_type(engine, run_id, ev.ToolRefused)
    assert len(refused) == len(UNREADABLE)
    for (tool, args, field), e, outcome in zip(UNREADABLE, refused, s.result, strict=True):
        assert e.tool == tool and e.cause == "policy_denied"
        assert f"argument {field!r} is" in e.reason and "cannot be counted" in e.reason
        assert outcome == ["PolicyDenied", e.reason], args
    assert of_type(engine, run_id, ev.ToolStarted) == []
    assert of_type(engine, run_id, ev.BudgetExceeded) == []


def test_an_agent_hears_the_refusal_as_an_observation(db_url: str) -> None:
    mt.executed.clear()

    def brain(req: ModelRequest) -> Any:
        seen = [m.content for m in req.messages if m.role == "tool"]
        if not seen:
            return say(None, ("issue_refund", {"invoice": "INV-7", "amount": "nan"}))
        return say(None, ("finish", {"result": seen[-1]}))

    agent = Agent("nan_refunds", model=RuleModel(brain), tools=[mt.issue_refund], plan=False)
    store = uw.connect(db_url)
    try:
        engine = uw.Engine(store, flows=[agent.flow])
        run_id, _ = engine.start(agent.flow, {"goal": "refund INV-7"})
        s = drive(engine, run_id)
        assert s.status == "completed" and mt.executed == []
        assert "argument 'amount' is nan" in s.result["result"]
        assert len(of_type(engine, run_id, ev.ToolRefused)) == 1
    finally:
        store.close()


def test_the_readme_agent_called_without_currency_needs_an_approval(db_url: str) -> None:
    def brain(req: ModelRequest) -> Any:
        seen = [m.content for m in req.messages if m.role == "tool"]
        if not seen:
            return say(None, ("issue_refund", {"invoice": "INV-7", "amount": 25000}))
        return say(None, ("finish", {"result": seen[-1]}))

    mt.executed.clear()
    agent = Agent("refunds", model=RuleModel(brain), tools=[mt.issue_refund], policy=POLICY,
                  plan=False)
    store = uw.connect(db_url)
    try:
        engine = uw.Engine(store, flows=[agent.flow])
        run_id, _ = engine.start(agent.flow, {"goal": "refund the duplicate charge on INV-7"})
        s = drive(engine, run_id)
        assert s.status == "waiting" and s.pending_approval is not None
        assert s.pending_approval.tool == "issue_refund" and mt.executed == []
    finally:
        store.close()


# -- one reader -------------------------------------------------------------------------


def test_the_reader_returns_a_typed_value() -> None:
    assert read_money(mt.issue_refund, {"amount": "25000"}) == Money("INR", Decimal("25000.0"))
    assert read_money(mt.issue_refund, {"amount": -0.0}) == Money("INR", Decimal("0.0"))
    assert read_money(mt.payout, {"amount": MAX_AMOUNT}) == Money(
        "INR", MAX_AMOUNT, "out"
    )
    assert isinstance(read_money(mt.payout, {"amount": MAX_AMOUNT + 1}), Unreadable)
    money = read_money(mt.transfer, {"amount": -12.5, "currency": " eur "})
    assert money == Money("EUR", Decimal("-12.5")) and isinstance(money, Money)
    assert money.exposure == Decimal("12.5") and money.counted() == 12.5
    assert read_money(uw.tool(lambda a: a, name="plain"), {"amount": 5}) is None
    unreadable = read_money(mt.issue_refund, {"amount": "nan"})
    assert isinstance(unreadable, Unreadable) and unreadable.field == "amount"
    assert str(unreadable) == (
        "the money this call of 'issue_refund' moves cannot be counted: argument 'amount' "
        "is nan, not a finite number; the call is denied"
    )
    with pytest.raises(uw.ConfigurationError, match="three-letter"):
        uw.tool(lambda a: a, name="bad", amount="amount", currency="rupees")
    with pytest.raises(uw.ConfigurationError, match="'amt', which its argument model Refund"):
        uw.Tool("typo", fn=print, args_model=mt.Refund, amount="amt", currency="INR")
    with pytest.raises(uw.ConfigurationError, match="'cur', which its argument model Refund"):
        uw.Tool("typo", fn=print, args_model=mt.Refund, amount="amount", currency="arg:cur")
    with pytest.raises(uw.ConfigurationError, match="money_direction"):
        uw.Tool("bad", fn=print, amount="amount", currency="INR",
                money_direction="sideways")  # type: ignore[arg-type]


# -- policy explain reads the amount from the arguments, as the worker does --------------


def explain(policy: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["policy", "explain", str(policy), "--json", *args])
    return result.exit_code, result.output


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.json.yaml"
    path.write_text(json.dumps(POLICY.to_dict()))
    return path


def decision(out: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(out[out.index("{"):])
    return data


@pytest.mark.parametrize(("args", "extra", "outcome", "says"), [
    ('{"amount": 20000, "currency": "INR"}', [], "require_approval", "big-refunds"),
    ('{"amount": -20000, "currency": "inr"}', [], "require_approval", "big-refunds"),
    ('{"amount": 20000}', ["--currency", "INR"], "require_approval", "big-refunds"),
    ('{"amount": 20000}', ["--amount", "20000 INR"], "require_approval", "big-refunds"),
    ('{"amount": 20000}', [], "deny", "argument 'currency' is missing"),
    ('{"amount": "nan", "currency": "INR"}', [], "deny", "argument 'amount' is 'nan'"),
    ('{"amount": true, "currency": "INR"}', [], "deny", "argument 'amount' is True"),
    ('{"amount": 20000}', ["--app", "money_tools:APP"], "require_approval", "big-refunds"),
    ('{"amount": "20000"}', ["--app", "money_tools:APP"], "require_approval", "big-refunds"),
    ('{"amount": "nan"}', ["--app", "money_tools:APP"], "deny", "argument 'amount' is nan"),
    ('{"amount": 9000}', ["--app", "money_tools:APP"], "allow", "default allow"),
    ('{"invoice": "INV-7"}', [], "allow", "default allow"),
])
def test_policy_explain_reads_the_amount_from_the_arguments(
    policy_file: Path, args: str, extra: list[str], outcome: str, says: str,
) -> None:
    code, out = explain(policy_file, "--tool", "issue_refund", "--args", args, *extra)
    assert code == 0, out
    d = decision(out)
    assert d["outcome"] == outcome
    assert says in (d["rule_id"] or "") + d["reason"]


def test_policy_explain_refuses_an_amount_that_disagrees_with_the_arguments(
    policy_file: Path,
) -> None:
    code, out = explain(policy_file, "--tool", "issue_refund", "--args",
                        '{"amount": 20000, "currency": "INR"}', "--amount", "5 INR")
    assert code == 2 and "--amount says 5 INR but --args say 20000 INR" in out
