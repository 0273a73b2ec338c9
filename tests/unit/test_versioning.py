"""Safe deploys for parked runs (docs/versioning.md): runs parked by old code — at a step
boundary, or mid-step waiting for an approval — meet new code. For each kind of change:
what `deploy check` says before the deploy, and what the parked runs do after it, unsafe
and then made safe (an alias, a default or upcaster, a compatible argument model, a
``ctx.version`` patch marker)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, model_validator

import underway as uw
from underway import events as ev
from underway.engine import Engine
from underway.errors import ConfigurationError
from underway.guard.policy import policy_from_dict
from underway.ops.deploy import DeployReport, check_deploy
from underway.ops.replay import replay_run
from underway.store import Store
from underway.testing import ManualClock, MemoryStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from guard_helpers import Approver, drive, of_type, run

HOLD_PAYMENTS = policy_from_dict({"version": "v1", "rules": [
    {"id": "payments-need-finance", "tools": ["pay"], "outcome": "require_approval",
     "approver_role": "finance"}]})


class Ledger(BaseModel):
    paid: int = 0
    notes: list[str] = []


class Amount(BaseModel):
    amount: int


@uw.tool(mutating=False)
async def quote(args: Any) -> dict[str, Any]:
    return {"amount": 120}


@uw.tool
async def pay(args: Amount) -> dict[str, Any]:
    return {"paid": args.amount}


def engine_on(store: Store, clock: ManualClock, flow: uw.Flow[Any, Any],
              *tools: uw.Tool) -> Engine:
    """What a worker running ``flow`` is: a fresh engine on the shared store (a deploy)."""
    return Engine(store, flows=[flow], tools=[quote, pay, *tools], clock=clock)


def world() -> tuple[MemoryStore, ManualClock]:
    store = MemoryStore()
    store.migrate()
    return store, ManualClock(1.7e9)


def check(store: Store, flow: uw.Flow[Any, Any], *tools: uw.Tool) -> DeployReport:
    return run(check_deploy(store, [flow], [quote, pay, *tools]))


def kinds(report: DeployReport) -> list[str]:
    return [b.kind for b in report.broken]


# -- renaming a step: an alias ----------------------------------------------------------
def sleeper(second: str, *, alias: bool = False) -> uw.Flow[Ledger, Any]:
    flow = uw.Flow("sleeper", state=Ledger)

    @flow.step(start=True)
    async def first(ctx: uw.RunContext[Ledger, Any]) -> Any:
        ctx.state.notes.append("first")
        return ctx.sleep(3600, then=second)

    async def later(ctx: uw.RunContext[Ledger, Any]) -> Any:
        ctx.state.notes.append(ctx.step)
        return ctx.done({"notes": ctx.state.notes})

    flow.step(later, name=second, aliases=["check"] if alias else ())
    return flow


def test_a_renamed_step_breaks_parked_runs_until_the_old_name_is_an_alias(tmp_path: Path) -> None:
    store, clock = world()
    old = engine_on(store, clock, sleeper("check"))
    run_id, _ = old.start("sleeper")
    assert drive(old, run_id).step == "check"

    renamed = sleeper("verify")
    report = check(store, renamed)
    assert (report.checked, kinds(report)) == (1, ["step"])
    assert "step 'check' is not in the new code" in report.broken[0].problem

    # Deployed anyway, the parked run stops dead at the missing step, saying why.
    clock.advance(3601)
    dead = drive(engine_on(store, clock, renamed), run_id)
    assert dead.status == "dead" and "has no step 'check'" in str(dead.error)

    # With the old name as an alias, a run parked there continues at the new step.
    store, clock = world()
    old = engine_on(store, clock, sleeper("check"))
    run_id, _ = old.start("sleeper")
    drive(old, run_id)
    aliased = sleeper("verify", alias=True)
    assert check(store, aliased).ok
    clock.advance(3601)
    done = drive(engine_on(store, clock, aliased), run_id)
    assert (done.status, done.result) == ("completed", {"notes": ["first", "verify"]})
    steps = [e.step for e in of_type(engine_on(store, clock, aliased), run_id, ev.StepStarted)]
    assert steps == ["first", "verify"]


def test_an_alias_must_lead_to_a_step() -> None:
    flow = uw.Flow("typo", state=Ledger)

    @flow.step
    async def only(ctx: uw.RunContext[Ledger, Any]) -> Any:
        return ctx.done()

    flow.alias("gone", to="nowhere")
    with pytest.raises(ConfigurationError, match="alias 'gone' leads to 'nowhere'"):
        Engine(MemoryStore(), flows=[flow])
    with pytest.raises(ConfigurationError, match="still has a step 'only'"):
        flow.alias("only", to="nowhere")


# -- removing a step with runs parked in it -----------------------------------------------
def test_a_removed_step_is_reported_and_its_parked_runs_sent_on(tmp_path: Path) -> None:
    store, clock = world()
    old = engine_on(store, clock, sleeper("check"))
    parked = [old.start("sleeper")[0] for _ in range(3)]
    for run_id in parked:
        drive(old, run_id)

    # The new code has no "check" step at all: every run parked there is listed.
    gone = uw.Flow("sleeper", state=Ledger)

    @gone.step(start=True)
    async def first(ctx: uw.RunContext[Ledger, Any]) -> Any:
        return ctx.done({"notes": ["new first"]})

    report = check(store, gone)
    assert sorted(b.run_id for b in report.broken) == sorted(parked)
    assert set(kinds(report)) == {"step"}

    # Retiring the step into another one sends the parked runs there.
    gone.alias("check", to="first")
    assert check(store, gone).ok
    clock.advance(3601)
    new = engine_on(store, clock, gone)
    assert {drive(new, r).result["notes"][0] for r in parked} == {"new first"}


# -- adding a state field: a default, or an upcaster ----------------------------------------
class LedgerWithCurrency(BaseModel):
    paid: int = 0
    notes: list[str] = []
    currency: str = "INR"


class LedgerRequiringRegion(BaseModel):
    paid: int = 0
    notes: list[str]
    region: str


class LedgerUpcast(LedgerRequiringRegion):
    @model_validator(mode="before")
    @classmethod
    def _from_v1(cls, data: Any) -> Any:
        # States journaled before `region` existed: derive it from what they hold.
        if isinstance(data, dict) and "region" not in data:
            return {**data, "region": "eu" if "first" in data.get("notes", []) else "in"}
        return data


def ledger_flow(state: type[BaseModel]) -> uw.Flow[Any, Any]:
    flow = uw.Flow("ledger", state=state, init=lambda _: state.model_validate(
        {"notes": [], "region": "in"}))

    @flow.step(start=True)
    async def first(ctx: uw.RunContext[Any, Any]) -> Any:
        ctx.state.notes.append("first")
        return ctx.sleep(60, then=second)

    @flow.step
    async def second(ctx: uw.RunContext[Any, Any]) -> Any:
        return ctx.done(ctx.state.model_dump())

    return flow


def test_a_new_state_field_needs_a_default_or_an_upcaster() -> None:
    store, clock = world()
    old = engine_on(store, clock, ledger_flow(Ledger))
    run_id, _ = old.start("ledger")
    drive(old, run_id)

    assert check(store, ledger_flow(LedgerWithCurrency)).ok

    report = check(store, ledger_flow(LedgerRequiringRegion))
    assert kinds(report) == ["state"]
    assert "fields region" in report.broken[0].problem

    assert check(store, ledger_flow(LedgerUpcast)).ok
    clock.advance(61)
    done = drive(engine_on(store, clock, ledger_flow(LedgerUpcast)), run_id)
    assert done.result == {"paid": 0, "notes": ["first"], "region": "eu"}
    # The upcast state is journaled with the step that completed under the new code.
    assert done.state["region"] == "eu"


# -- mid-step: a payment held for approval when the code changes --------------------------
def payer(*, v2: bool = False, marker: bool = False, typed: type[BaseModel] = Amount,
          extra: dict[str, Any] | None = None) -> tuple[uw.Flow[Ledger, Any], uw.Tool]:
    """Quote, then pay — held for finance. ``v2`` pays 10 more (a changed call); with
    ``marker`` only runs on the new path of ctx.version("pay-with-fee") do."""

    async def pays(args: Any) -> dict[str, Any]:
        return {"paid": args.amount}

    paying: uw.Tool = uw.Tool(name="pay", fn=pays, args_model=typed)

    flow = uw.Flow("payer", state=Ledger, policy=HOLD_PAYMENTS, tools=[quote, paying])

    @flow.step(start=True)
    async def settle(ctx: uw.RunContext[Ledger, Any]) -> Any:
        amount = (await ctx.call(quote, {}))["amount"]
        if v2 and (not marker or ctx.version("pay-with-fee")):
            amount += 10
        paid = await ctx.call(paying, {"amount": amount, **(extra or {})})
        ctx.state.paid = paid["paid"]
        return ctx.sleep(60, then=receipt)

    @flow.step
    async def receipt(ctx: uw.RunContext[Ledger, Any]) -> Any:
        return ctx.done({"paid": ctx.state.paid})

    return flow, paying


def parked_payment(tmp_path: Path) -> tuple[MemoryStore, ManualClock, str, Approver]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    store, clock = world()
    flow, _ = payer()
    old = Engine(store, flows=[flow], clock=clock)
    run_id, _ = old.start("payer")
    assert drive(old, run_id).pending_approval is not None
    return store, clock, run_id, Approver(old, tmp_path, "fin", ("finance",))


def approve_and_drive(store: Store, clock: ManualClock, flow: uw.Flow[Any, Any], run_id: str,
                      approver: Approver) -> Any:
    """Approve the held payment with the new code deployed; drive the run to its end."""
    new = Engine(store, flows=[flow], clock=clock)
    new.submit_decision(approver.decide(new.state(run_id)))
    drive(new, run_id)
    clock.advance(61)
    return drive(new, run_id)


def test_a_changed_call_sequence_is_found_before_the_deploy(tmp_path: Path) -> None:
    store, clock, run_id, approver = parked_payment(tmp_path)
    flow, _ = payer(v2=True)
    report = run(check_deploy(store, [flow]))
    assert (report.checked, report.rerun, kinds(report)) == (1, 1, ["nondeterminism"])
    assert "step 'settle' call #1 is now pay" in report.broken[0].problem
    # Deployed anyway: the held call now has other arguments than those approved.
    stopped = approve_and_drive(store, clock, flow, run_id, approver)
    assert stopped.status == "dead"
    assert of_type(Engine(store, flows=[flow]), run_id, ev.ToolRefused)[0].cause == \
        "approval_invalid"


def test_ctx_version_keeps_parked_runs_on_the_old_path_and_new_runs_on_the_new(
    tmp_path: Path,
) -> None:
    store, clock, parked, approver = parked_payment(tmp_path)
    flow, _ = payer(v2=True, marker=True)
    assert run(check_deploy(store, [flow])).ok

    new = Engine(store, flows=[flow], clock=clock)
    new.submit_decision(approver.decide(new.state(parked)))
    assert drive(new, parked).versions == {"pay-with-fee": False}
    # Until it ends, the check says one run is on the old path: keep the old branch.
    assert run(check_deploy(store, [flow])).old_paths == {"pay-with-fee": 1}
    clock.advance(61)
    old_path = drive(new, parked)
    assert (old_path.status, old_path.result) == ("completed", {"paid": 120})
    assert run(check_deploy(store, [flow])).old_paths == {}

    fresh, _ = new.start("payer")
    drive(new, fresh)
    new.submit_decision(approver.decide(new.state(fresh)))
    drive(new, fresh)
    clock.advance(61)
    new_path = drive(new, fresh)
    assert (new_path.result, new_path.versions) == ({"paid": 130}, {"pay-with-fee": True})
    marks = of_type(new, fresh, ev.VersionMarked)
    assert [(m.change_id, m.patched, m.step) for m in marks] == [
        ("pay-with-fee", True, "settle")]


def test_a_replay_keeps_the_path_each_original_ran(tmp_path: Path) -> None:
    """A run the old code completed replays under the patched code on the old path (no
    change reported); a run the patched code made replays on the path it took."""
    store, clock, old_run, approver = parked_payment(tmp_path)
    old_flow, _ = payer()
    approve_and_drive(store, clock, old_flow, old_run, approver)
    flow, paying = payer(v2=True, marker=True)
    new = Engine(store, flows=[flow], clock=clock)
    new_run, _ = new.start("payer")
    drive(new, new_run)
    new.submit_decision(approver.decide(new.state(new_run)))
    drive(new, new_run)
    clock.advance(61)
    assert drive(new, new_run).result == {"paid": 130}
    for run_id in (old_run, new_run):
        replayed = run(replay_run(store, run_id, flows=[flow], tools=[quote, paying]))
        assert replayed.changes == [], (run_id, replayed.changes)
    # Without the marker the same code would replay the old run down the new path.
    unmarked, unmarked_pay = payer(v2=True)
    changed = run(replay_run(store, old_run, flows=[unmarked], tools=[quote, unmarked_pay]))
    assert changed.changes


def test_the_version_decided_first_holds_for_the_rest_of_the_run() -> None:
    flow = uw.Flow("twice", state=Ledger)

    @flow.step(start=True)
    async def one(ctx: uw.RunContext[Ledger, Any]) -> Any:
        ctx.state.notes.append(str(ctx.version("x")))
        return ctx.goto(two)

    @flow.step
    async def two(ctx: uw.RunContext[Ledger, Any]) -> Any:
        ctx.state.notes.append(str(ctx.version("x")))
        return ctx.done(ctx.state.notes)

    store, clock = world()
    engine = Engine(store, flows=[flow], clock=clock)
    run_id, _ = engine.start("twice")
    assert drive(engine, run_id).result == ["True", "True"]
    assert len(of_type(engine, run_id, ev.VersionMarked)) == 1
    with pytest.raises(ConfigurationError, match="non-empty"):
        run(_ask_version(""))


async def _ask_version(change: str) -> bool:
    flow = uw.Flow("v", state=Ledger)
    seen: list[bool] = []

    @flow.step
    async def only(ctx: uw.RunContext[Ledger, Any]) -> Any:
        seen.append(ctx.version(change))
        return ctx.done()

    store, clock = world()
    engine = Engine(store, flows=[flow], clock=clock)
    run_id, _ = engine.start("v")
    state = await uw.Runner(engine).run_until_complete(run_id)
    if state.status == "dead":
        raise ConfigurationError(str(state.error))
    return seen[0]


# -- changing a tool's argument model ------------------------------------------------------
class AmountWithCurrency(BaseModel):
    amount: int
    currency: str = "INR"


class AmountRequiringCurrency(BaseModel):
    amount: int
    currency: str


def test_a_tool_argument_model_must_still_take_the_held_calls_arguments(tmp_path: Path) -> None:
    # A new optional field, the step sending what it sent before: the held call still fits.
    store, clock, run_id, approver = parked_payment(tmp_path)
    flow, _ = payer(typed=AmountWithCurrency)
    assert run(check_deploy(store, [flow])).ok
    done = approve_and_drive(store, clock, flow, run_id, approver)
    assert done.result == {"paid": 120}

    # A new required field: the held call's arguments no longer fit, found before the deploy.
    store, clock, run_id, approver = parked_payment(tmp_path / "2")
    flow, _ = payer(typed=AmountRequiringCurrency)
    report = run(check_deploy(store, [flow]))
    assert kinds(report) == ["arguments"]
    assert "no longer fit AmountRequiringCurrency: currency" in report.broken[0].problem

    # The step sending the new field changes the call itself (its arguments' hash).
    store, clock, run_id, approver = parked_payment(tmp_path / "3")
    flow, _ = payer(typed=AmountRequiringCurrency, extra={"currency": "INR"})
    assert kinds(run(check_deploy(store, [flow]))) == ["nondeterminism"]
