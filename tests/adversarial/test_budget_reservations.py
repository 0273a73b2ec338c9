"""A budget is never crossed, at any concurrency: each call's amounts are reserved against
the tenant's ledger at the guard, before its intent commits, and settled on its outcome.

Attacked on SQLite and PostgreSQL with many runs in one worker at concurrency 10 (group
commit on), with two worker processes, with a worker killed between the reservation and
the outcome, with retries, with model calls (priced, unpriced, unquotable), and with a
ledger that starts mid-day after the journal already holds the day's spending.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import budget_app as app
import pytest

import underway as uw
from fakes.processes import finish
from underway import events as ev
from underway.effects import ModelQuote
from underway.guard._guard import _day_start
from underway.guard.budgets import Budget, tenant_usage
from underway.models.types import ModelRequest
from underway.runner import Runner

APP = Path(app.__file__)


@pytest.fixture
def store(db_url: str) -> Iterator[uw.Store]:
    s = uw.connect(db_url)
    s.migrate()
    yield s
    s.close()


def start_runs(eng: uw.Engine, n: int, amount: float = app.PRICE_INR) -> list[str]:
    return [eng.start(app.payments, {"amount": amount})[0] for _ in range(n)]


def journaled(eng: uw.Engine, run_ids: list[str], cls: type[ev.Event]) -> list[Any]:
    return [r.event for run_id in run_ids for r in eng.journal.history("default", run_id)
            if isinstance(r.event, cls)]


def paid_in_log(log: Path) -> list[float]:
    return [float(x) for x in log.read_text().split()] if log.exists() else []


def test_ten_runs_at_concurrency_ten_pay_once_against_a_budget_of_one(
    store: uw.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "paid.log"
    monkeypatch.setattr(app, "LOG", str(log))
    eng = app.engine(store)
    runs = start_runs(eng, 10)
    asyncio.run(Runner(eng, concurrency=10).run_until_idle())
    assert paid_in_log(log) == [app.PRICE_INR]
    states = [eng.state(r) for r in runs]
    assert sorted(s.status for s in states) == ["completed"] + ["failed"] * 9
    refusals = journaled(eng, runs, ev.BudgetExceeded)
    assert len(refusals) == 9
    assert {(e.scope, e.metric, e.limit) for e in refusals} == {
        ("tenant", "money.INR", app.LIMIT_INR)}
    # The journal and the ledger agree on what was spent.
    assert tenant_usage(store, "default", since=0).money == {"INR": app.PRICE_INR}
    day = _day_start(eng.clock.now())
    assert store.budget_used("default", day) == {"money.INR": app.PRICE_INR,
                                                 "tool_calls": 1.0}


@pytest.mark.parametrize("budget", ["three_calls", "three_payments"])
def test_two_worker_processes_never_pay_past_the_budget(
    db_url: str, store: uw.Store, tmp_path: Path, budget: str,
) -> None:
    log = tmp_path / "paid.log"
    eng = app.engine(store, budget)
    runs = start_runs(eng, 20)
    env = {**os.environ, "BUDGET_APP_LOG": str(log), "BUDGET_APP_BUDGET": budget}
    workers = [subprocess.Popen([sys.executable, str(APP), db_url], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(2)]
    for w in workers:
        assert not finish(w)
    # Whichever worker took which run, exactly three fit and the rest were refused.
    assert paid_in_log(log) == [app.PRICE_INR] * 3
    assert sorted(eng.state(r).status for r in runs) == ["completed"] * 3 + ["failed"] * 17
    assert len(journaled(eng, runs, ev.ToolSucceeded)) == 3


def test_a_worker_killed_mid_call_keeps_its_reservation(
    db_url: str, store: uw.Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    eng = app.engine(store)
    (first,) = start_runs(eng, 1)
    env = {**os.environ, "BUDGET_APP_CRASH": str(tmp_path / "crashed")}
    proc = subprocess.run([sys.executable, str(APP), db_url], env=env,
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == 3, proc.stderr.decode(errors="replace")
    # The intent committed and the worker died: the outcome is unknown, so the 700 INR
    # stay reserved and a second payment of 700 would cross the limit.
    assert [type(e).__name__ for e in journaled(eng, [first], ev.ToolStarted)] == [
        "ToolStarted"]
    day = _day_start(eng.clock.now())
    assert store.budget_used("default", day) == {"money.INR": app.PRICE_INR,
                                                 "tool_calls": 1.0}
    log = tmp_path / "paid.log"
    monkeypatch.setattr(app, "LOG", str(log))
    (second,) = start_runs(eng, 1)
    asyncio.run(Runner(eng).run_until_idle())
    assert eng.state(second).status == "failed"
    (refused,) = journaled(eng, [second], ev.BudgetExceeded)
    assert (refused.metric, refused.used) == ("money.INR", 2 * app.PRICE_INR)
    assert paid_in_log(log) == []


def test_a_call_retried_with_its_key_is_reserved_once(store: uw.Store) -> None:
    attempts: list[int] = []

    @uw.tool(mutating=True, idempotent=True, amount="amount", currency="INR",
             retry=uw.RetryPolicy(max_attempts=3, initial_interval=1.0, jitter=False))
    async def flaky_pay(args: app.Pay) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionResetError("the bank hung up before answering")
        return {"paid": args.amount}

    flow = uw.Flow("budget_flaky", state=app.Paid, input=app.Pay, tools=(flaky_pay,))

    @flow.step
    async def go(ctx: uw.RunContext[app.Paid, app.Pay]) -> Any:
        await ctx.call("flaky_pay", ctx.input.model_dump())
        return ctx.done("paid")

    clock = uw.ManualClock(1.7e9)
    eng = uw.Engine(store, flows=[flow], clock=clock)
    eng.guard.tenant_budget = Budget(money={"INR": app.LIMIT_INR}, on_exceed="fail")
    run_id, _ = eng.start(flow, {"amount": app.PRICE_INR})
    for _ in range(5):
        asyncio.run(Runner(eng).run_until_idle())
        if eng.state(run_id).status == "completed":
            break
        clock.advance(60)
    assert eng.state(run_id).status == "completed"
    assert len(attempts) == 2
    day = _day_start(eng.clock.now())
    # Two attempts of one call: one hold, counted once.
    assert store.budget_used("default", day) == {"money.INR": app.PRICE_INR,
                                                 "tool_calls": 1.0}


def test_a_refused_or_failed_call_releases_its_reservation(store: uw.Store) -> None:
    @uw.tool(irreversible=True, amount="amount", currency="INR")
    async def declined(args: app.Pay) -> dict[str, Any]:
        raise ValueError("card declined")

    flow = uw.Flow("budget_declined", state=app.Paid, input=app.Pay,
                   tools=(declined, app.pay))

    @flow.step
    async def go(ctx: uw.RunContext[app.Paid, app.Pay]) -> Any:
        try:
            await ctx.call("declined", ctx.input.model_dump())
        except uw.ToolCallError:
            await ctx.call("pay", ctx.input.model_dump())
        return ctx.done("paid")

    eng = uw.Engine(store, flows=[flow])
    eng.guard.tenant_budget = Budget(money={"INR": app.LIMIT_INR}, on_exceed="fail")
    run_id, _ = eng.start(flow, {"amount": app.PRICE_INR})
    asyncio.run(Runner(eng).run_until_idle())
    # The declined payment moved nothing: its 700 came back, and the second fits.
    assert eng.state(run_id).status == "completed"
    day = _day_start(eng.clock.now())
    assert store.budget_used("default", day) == {"money.INR": app.PRICE_INR,
                                                 "tool_calls": 2.0}


def test_a_ledger_started_mid_day_counts_what_the_journal_holds(store: uw.Store) -> None:
    before = app.engine(store)
    before.guard.tenant_budget = None  # an earlier version: no ledger, nothing reserved
    start_runs(before, 1)
    asyncio.run(Runner(before).run_until_idle())
    eng = app.engine(store)
    (late,) = start_runs(eng, 1)
    asyncio.run(Runner(eng).run_until_idle())
    assert eng.state(late).status == "failed"
    (refused,) = journaled(eng, [late], ev.BudgetExceeded)
    assert (refused.metric, refused.used) == ("money.INR", 2 * app.PRICE_INR)


# -- model calls ---------------------------------------------------------------------------


def model_flow(model: Any, budget: Budget | None = None) -> uw.Flow[Any, Any]:
    flow = uw.Flow("budget_model", state=app.Paid, budget=budget)

    @flow.step
    async def ask(ctx: uw.RunContext[app.Paid, Any]) -> Any:
        req = ModelRequest.model_validate({"messages": [{"role": "user", "content": "hi"}],
                                           "max_tokens": 100})
        await ctx.model(model, req.to_json())
        return ctx.done("asked")

    return flow


def test_concurrent_model_calls_never_cross_the_tenant_cost_budget(store: uw.Store) -> None:
    class Priced:
        name = "priced"

        async def complete(self, request: Any) -> uw.ModelReply:
            await asyncio.sleep(0)
            return uw.ModelReply({"text": "ok"}, "priced", 10, 10, 0.4)

        def quote(self, request: Any) -> ModelQuote:
            return ModelQuote(20, 0.4)

    flow = model_flow(Priced())
    eng = uw.Engine(store, flows=[flow])
    eng.guard.tenant_budget = Budget(cost_usd=1.0, on_exceed="fail")
    runs = [eng.start(flow, {})[0] for _ in range(10)]
    asyncio.run(Runner(eng, concurrency=10).run_until_idle())
    assert sorted(eng.state(r).status for r in runs) == ["completed"] * 2 + ["failed"] * 8
    assert tenant_usage(store, "default", since=0).cost_usd == pytest.approx(0.8)


def test_a_model_that_cannot_be_priced_is_refused_under_a_cost_budget(
    store: uw.Store,
) -> None:
    class Unquoted:
        name = "mystery"

        async def complete(self, request: Any) -> uw.ModelReply:
            raise AssertionError("an unpriced model must not be asked")

    flow = model_flow(Unquoted(), Budget(cost_usd=5.0, on_exceed="fail"))
    eng = uw.Engine(store, flows=[flow])
    run_id, _ = eng.start(flow, {})
    asyncio.run(Runner(eng).run_until_idle())
    s = eng.state(run_id)
    assert s.status == "failed"
    (refused,) = journaled(eng, [run_id], ev.BudgetExceeded)
    assert refused.metric == "cost_usd" and refused.scope == "run"
    assert "'mystery' cannot quote" in (refused.reason or "")
    assert "cannot price" in (s.error or "")


def test_an_adapter_of_an_unknown_model_is_refused_and_a_known_one_quotes() -> None:
    from underway.models import OpenAIChat, PriceTable

    request = ModelRequest.model_validate({
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}).to_json()
    unknown = OpenAIChat("my-local-llm", api_key="x")
    q = unknown.quote(request)
    assert q.cost_usd is None and "no price" in (q.reason or "")
    free = OpenAIChat("my-local-llm", api_key="x",
                      prices=PriceTable.from_dict({"my-local-llm": {"input": 0, "output": 0}}))
    assert free.quote(request).cost_usd == 0.0
    known = OpenAIChat("gpt-5", api_key="x").quote(request)
    assert known.tokens is not None and known.cost_usd is not None
    # At most: the output allowed priced at gpt-5's $10 per 1M output tokens, plus input.
    assert 1000 * 10 / 1e6 < known.cost_usd < 0.02


@pytest.mark.parametrize("limit", ["tokens", "cost_usd"])
def test_a_bounded_but_unpriced_model_is_held_only_by_a_cost_budget(
    store: uw.Store, limit: str,
) -> None:
    """A quote that bounds the tokens but not the cost: a token budget counts the call (the
    tokens are known), a cost budget refuses it before it is sent."""
    asked: list[Any] = []

    class Unpriced:
        name = "local"

        async def complete(self, request: Any) -> uw.ModelReply:
            asked.append(request)
            return uw.ModelReply({"text": "ok"}, "local", 10, 10, 0.0)

        def quote(self, request: Any) -> ModelQuote:
            return ModelQuote(200, None, "model 'local' has no price")

    budget = Budget(**{limit: 1000}, on_exceed="fail")  # type: ignore[arg-type]
    flow = model_flow(Unpriced(), budget)
    eng = uw.Engine(store, flows=[flow])
    run_id, _ = eng.start(flow, {})
    asyncio.run(Runner(eng).run_until_idle())
    if limit == "tokens":
        assert eng.state(run_id).status == "completed" and len(asked) == 1
        assert journaled(eng, [run_id], ev.BudgetExceeded) == []
    else:
        assert eng.state(run_id).status == "failed" and asked == []
        (refused,) = journaled(eng, [run_id], ev.BudgetExceeded)
        assert refused.metric == "cost_usd" and "no price" in (refused.reason or "")


PARALLEL = [
    (Budget(money={"INR": 1000}, on_exceed="fail"), "pay", 1),
    (Budget(money={"INR": 1400}, on_exceed="fail"), "pay", 2),
    (Budget(tool_calls=3, on_exceed="fail"), "pay", 3),
    (Budget(tool_calls=3, on_exceed="fail"), "look", 3),
    (Budget(messages=2, on_exceed="fail"), "tell", 2),
    (Budget(model_calls=2, on_exceed="fail"), "model", 2),
    (Budget(tokens=45, on_exceed="fail"), "model", 2),
]


@pytest.mark.parametrize(("budget", "kind", "allowed"), PARALLEL,
                         ids=[f"{k}-{i}" for i, (_, k, _) in enumerate(PARALLEL)])
def test_calls_a_step_makes_at_once_never_cross_the_run_budget(
    store: uw.Store, budget: Budget, kind: str, allowed: int,
) -> None:
    """Five calls gathered in one step, each admitted before any ends: the run's budget
    counts the ones in flight. The step gathers with ``return_exceptions=True``, which
    would swallow the refusal; the run still fails as its budget says."""
    done: list[str] = []

    @uw.tool(irreversible=True, amount="amount", currency="arg:currency")
    async def pay(args: app.Pay) -> dict[str, Any]:
        await asyncio.sleep(0)
        done.append("pay")
        return {"paid": args.amount}

    @uw.tool(read_only=True)
    async def look(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        done.append("look")
        return {}

    @uw.tool(idempotent=True, message=True)
    async def tell(args: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        done.append("tell")
        return {}

    class Counted:
        name = "counted"

        async def complete(self, request: Any) -> uw.ModelReply:
            await asyncio.sleep(0)
            done.append("model")
            return uw.ModelReply({"text": "ok"}, "counted", 10, 10, 0.0)

        def quote(self, request: Any) -> ModelQuote:
            return ModelQuote(20, 0.0)

    model = Counted()
    flow = uw.Flow("parallel_budget", state=app.Paid, budget=budget, tools=(pay, look, tell))

    @flow.step
    async def fan_out(ctx: uw.RunContext[app.Paid, Any]) -> Any:
        def one(i: int) -> Any:
            if kind == "model":
                return ctx.model(model, {"messages": [{"role": "user", "content": str(i)}],
                                         "max_tokens": 10})
            args = {"amount": 700, "currency": "INR"} if kind == "pay" else {"i": i}
            return ctx.call({"pay": pay, "look": look, "tell": tell}[kind], args)

        got = await asyncio.gather(*(one(i) for i in range(5)), return_exceptions=True)
        return ctx.done([type(g).__name__ for g in got])

    eng = uw.Engine(store, flows=[flow])
    run_id, _ = eng.start(flow, {})
    asyncio.run(Runner(eng).run_until_idle())
    s = eng.state(run_id)
    assert len(done) == allowed, done
    assert s.status == "failed" and "budget" in (s.error or ""), (s.status, s.error)
    assert journaled(eng, [run_id], ev.BudgetExceeded)


def test_calls_of_earlier_steps_are_not_counted_again_in_flight(store: uw.Store) -> None:
    """Each step's calls are numbered from 0: a settled call of the step before never
    counts in flight for the next one. Two steps, one message each, reach messages=2."""
    sent: list[int] = []

    @uw.tool(idempotent=True, message=True)
    async def tell(args: dict[str, Any]) -> dict[str, Any]:
        sent.append(int(args["n"]))
        return {}

    flow = uw.Flow("two_steps", state=app.Paid, budget=Budget(messages=2, on_exceed="fail"),
                   tools=(tell,))

    @flow.step
    async def first(ctx: uw.RunContext[app.Paid, Any]) -> Any:
        await ctx.call(tell, {"n": 1})
        return ctx.goto(second)

    @flow.step
    async def second(ctx: uw.RunContext[app.Paid, Any]) -> Any:
        await ctx.call(tell, {"n": 2})
        return ctx.done("told")

    eng = uw.Engine(store, flows=[flow])
    run_id, _ = eng.start(flow, {})
    asyncio.run(Runner(eng).run_until_idle())
    assert eng.state(run_id).status == "completed" and sent == [1, 2]


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5-mini", "o3", "o4-mini",
                                   "claude-opus-4-5"])
def test_the_models_once_priced_at_none_are_priced_and_quoted(model: str) -> None:
    """The witnesses of an unpriced call: each now has a price, so a cost budget counts
    its calls before they are sent."""
    from underway.models import AnthropicMessages, OpenAIChat

    request = ModelRequest.model_validate({
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000}).to_json()
    adapter = (AnthropicMessages(model, api_key="x") if model.startswith("claude")
               else OpenAIChat(model, api_key="x"))
    q = adapter.quote(request)
    assert q.reason is None and q.tokens is not None and q.cost_usd is not None
    assert q.cost_usd > 0
    assert adapter.cost(model, 1000, 1000, 0) > 0


def test_a_model_call_that_lost_its_answer_keeps_its_reservation(store: uw.Store) -> None:
    """A request that left and lost its answer may have been billed: its cost stays
    reserved, so the calls after it cannot spend that room again. One that failed before
    it was sent gives its room back."""

    class Lossy:
        name = "lossy"

        def __init__(self) -> None:
            self.sent = 0

        async def complete(self, request: Any) -> uw.ModelReply:
            self.sent += 1
            if self.sent == 1:
                raise uw.OutcomeUnknown("the answer was lost after the request left")
            if self.sent == 2:
                raise ConnectionRefusedError("nothing was sent")
            return uw.ModelReply({"text": "ok"}, "lossy", 10, 10, 0.4)

        def quote(self, request: Any) -> ModelQuote:
            return ModelQuote(20, 0.4)

    model = Lossy()
    flow = model_flow(model)
    eng = uw.Engine(store, flows=[flow])
    eng.guard.tenant_budget = Budget(cost_usd=1.0, on_exceed="fail")
    runs = [eng.start(flow, {})[0] for _ in range(4)]
    for _ in range(4):
        asyncio.run(Runner(eng).run_until_idle())
    day = _day_start(eng.clock.now())
    used = store.budget_used("default", day) or {}
    # The lost request (0.4) and one answered call (0.4) hold 0.8: a second answered call
    # would reach 1.2, past the limit.
    assert used.get("cost_usd") == pytest.approx(0.8)
    assert [eng.state(r).status for r in runs].count("completed") == 1
