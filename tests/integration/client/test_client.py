"""The client does what an operator or another service does — start by flow name, signal,
cancel, resume, resolve, decide, read, list — with no flow code; a worker with the flows
runs what it started. Every test runs on memory, SQLite and a real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import underway as uw
from fakes.invoice_flows import Invoice, Notes, refunds, reminders
from underway import events as ev
from underway.clock import ManualClock
from underway.errors import AmbiguousRunId
from underway.guard.approvals import public_key_of, register_approver, sign_decision
from underway.runner import Runner
from underway.store import MemoryStore, Store, connect

T0 = 1.8e9


broken: uw.Flow[Notes, Invoice] = uw.Flow("broken", state=Notes, input=Invoice)
FIXED: list[bool] = []


@broken.step
async def parse(ctx: uw.RunContext[Notes, Invoice]) -> Any:
    if not FIXED:
        raise ValueError("cannot parse the invoice")
    return ctx.done("parsed")


class World:
    """A client with no flow code, and a worker's engine with the flows, on one database."""

    def __init__(self, url: str | None) -> None:
        self.clock = ManualClock(T0)
        shared = MemoryStore() if url is None else None
        if shared is not None:
            shared.migrate()
        self.client_store: Store = shared or connect(url or "")
        self.worker_store: Store = shared or connect(url or "")
        self.client = uw.Client(self.client_store, clock=self.clock)
        self.engine = uw.Engine(self.worker_store, flows=[reminders, refunds, broken],
                                clock=self.clock)
        FIXED.clear()

    def drive(self) -> None:
        asyncio.run(Runner(self.engine).run_until_idle())

    def types(self, run_id: str) -> list[str]:
        return [type(r.event).__name__ for r in self.client.history(run_id)]

    def close(self) -> None:
        self.client_store.close()
        if self.worker_store is not self.client_store:
            self.worker_store.close()


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    url = {"memory": lambda: None, "sqlite": lambda: request.getfixturevalue("sqlite_url"),
           "postgres": lambda: request.getfixturevalue("pg_url")}[request.param]()
    w = World(url)
    yield w
    w.close()


def approver(world: World, name: str, *roles: str) -> Ed25519PrivateKey:
    key = Ed25519PrivateKey.generate()
    register_approver(world.client.store, name, public_key=public_key_of(key), roles=roles,
                      now=world.clock.now())
    return key


# -- starting -------------------------------------------------------------------------------


def test_a_run_started_by_flow_name_is_checked_and_run_by_a_worker_with_the_flow(
    world: World,
) -> None:
    run_id, created = world.client.start("reminders", {"invoice": "INV-1", "amount": 7},
                                         idempotency_key="INV-1")
    assert created
    before = world.client.state(run_id)
    assert before.flow == "reminders" and not before.input_checked
    assert world.client.get_run(run_id).status == "ready"

    world.drive()
    s = world.client.state(run_id)
    assert s.input_checked and s.status == "waiting" and s.waiting_signal == "paid"
    assert s.state == {"seen": ["INV-1"]}
    assert world.types(run_id)[:3] == ["RunStarted", "InputChecked", "StepStarted"]
    # The flow's declared signals are journaled by the check: the client refuses others.
    assert world.client.declared_signals(run_id) == frozenset({"paid"})
    with pytest.raises(uw.ConfigurationError, match="takes only the signals"):
        world.client.signal(run_id, "refunded")


def test_the_same_idempotency_key_finds_the_run_it_started(world: World) -> None:
    first, created = world.client.start("reminders", {"invoice": "I", "amount": 1},
                                        idempotency_key="k-1")
    again, created_again = world.client.start("reminders", {"invoice": "other", "amount": 2},
                                              idempotency_key="k-1")
    assert (again, created, created_again) == (first, True, False)
    assert len(world.client.list_runs().runs) == 1


def test_bad_input_started_by_name_fails_the_run_before_any_step(world: World) -> None:
    run_id, _ = world.client.start("reminders", {"invoice": "INV-2"})  # no amount
    world.drive()
    s = world.client.state(run_id)
    assert s.status == "failed"
    assert s.error is not None and "invalid input for flow 'reminders'" in s.error
    assert "amount" in s.error
    failed = world.client.history(run_id)[-1].event
    assert isinstance(failed, ev.RunFailed) and failed.error_type == "InvalidInput"
    assert world.types(run_id) == ["RunStarted", "RunFailed"]
    assert world.client.verify(run_id).ok


def test_a_client_with_the_flows_checks_input_eagerly_and_stores_nothing(world: World) -> None:
    client = uw.Client(world.client_store, flows=[reminders], clock=world.clock)
    with pytest.raises(uw.ConfigurationError, match="invalid input for flow 'reminders'"):
        client.start("reminders", {"invoice": "INV-3"})
    with pytest.raises(uw.ConfigurationError, match="not registered"):
        client.start("remindres", {"invoice": "INV-3", "amount": 1})
    assert client.list_runs().runs == []
    run_id, _ = client.start(reminders, {"invoice": "INV-3", "amount": 1})
    assert client.state(run_id).input_checked


def test_input_that_is_not_json_or_a_bad_flow_name_is_refused(world: World) -> None:
    with pytest.raises(uw.ConfigurationError, match="not JSON"):
        world.client.start("reminders", {"at": object()})
    with pytest.raises(uw.ConfigurationError, match="flow name"):
        world.client.start("no spaces please", {})
    assert world.client.list_runs().runs == []


# -- steering -------------------------------------------------------------------------------


def test_signal_delivers_once_per_id_and_wakes_the_run(world: World) -> None:
    run_id, _ = world.client.start("reminders", {"invoice": "INV-4", "amount": 9})
    world.drive()
    assert world.client.signal(run_id, "paid", {"by": "bank"}, signal_id="s-1", sender="bank")
    assert not world.client.signal(run_id, "paid", {"by": "bank"}, signal_id="s-1")
    with pytest.raises(uw.ConfigurationError, match="reserved"):
        world.client.signal(run_id, "underway.cancel")
    with pytest.raises(uw.RunNotFound):
        world.client.signal("no-such-run", "paid")
    world.drive()
    s = world.client.state(run_id)
    assert s.status == "completed" and s.result == {"paid": {"by": "bank"}}


def test_cancel_is_journaled_with_who_asked(world: World) -> None:
    run_id, _ = world.client.start("reminders", {"invoice": "INV-5", "amount": 1})
    world.drive()
    world.client.cancel(run_id, by="ops@acme", reason="customer left")
    world.drive()
    cancelled = world.client.history(run_id)[-1].event
    assert isinstance(cancelled, ev.RunCancelled)
    assert (cancelled.by, cancelled.reason) == ("ops@acme", "customer left")
    assert world.client.get_run(run_id).status == "cancelled"


def test_resume_restarts_a_dead_run_and_names_who_did(world: World) -> None:
    run_id, _ = world.client.start("broken", {"invoice": "INV-6", "amount": 1})
    world.drive()
    assert world.client.get_run(run_id).status == "dead"
    with pytest.raises(uw.ConfigurationError, match="not escalated"):
        world.client.resolve(run_id, resolution="retry", by="ops")
    FIXED.append(True)
    world.client.resume(run_id, by="ops@acme")
    world.drive()
    resumed = [r.event for r in world.client.history(run_id)
               if isinstance(r.event, ev.RunResumed)]
    assert [e.by for e in resumed] == ["ops@acme"]
    assert world.client.state(run_id).result == "parsed"
    with pytest.raises(uw.ConfigurationError, match="only dead runs"):
        world.client.resume(run_id, by="ops")


def test_a_signed_approval_submitted_through_the_client_lets_the_call_run(
    world: World,
) -> None:
    key = approver(world, "alice", "finance")
    run_id, _ = world.client.start("refunds", {"invoice": "INV-8", "amount": 40})
    world.drive()

    [request] = world.client.pending_requests()
    assert (request.run_id, request.kind, request.tool) == (run_id, "approval", "refund")
    assert request.args == {"invoice": "INV-8", "amount": 40}
    assert request.required_role == "finance"
    assert world.client.pending_request(run_id) == request

    decision = sign_decision(
        key, request_id=request.request_id, run_id=run_id, tenant_id="default",
        tool=request.tool, args_hash=request.args_hash, decision="approve",
        expires_at=request.expires_at, approver_id="alice", comment="ok",
    ).model_dump(mode="json")
    forged = dict(decision, args_hash="0" * 64)
    with pytest.raises(uw.ConfigurationError, match="would be refused"):
        world.client.submit_decision(forged)
    with pytest.raises(uw.ConfigurationError, match="tenant"):
        world.client.submit_decision(decision, tenant_id="other")
    assert world.client.submit_decision(decision)
    assert not world.client.submit_decision(decision)  # the same decision again
    world.drive()
    s = world.client.state(run_id)
    assert s.status == "completed" and s.result == {"refunded": "INV-8"}
    assert world.client.pending_requests() == []
    assert world.client.pending_request(run_id) is None


def test_an_escalation_is_listed_with_its_call_and_resolved_by_a_named_person(
    world: World,
) -> None:
    run_id, _ = world.client.start("reminders", {"invoice": "INV-9", "amount": 3},
                                   deadline=T0 + 60)
    world.drive()
    world.clock.advance(61)
    world.drive()
    assert world.client.get_run(run_id).status == "escalated"
    [request] = world.client.pending_requests()
    assert (request.kind, request.cause) == ("resolution", "deadline")
    world.client.resolve(run_id, resolution="retry", by="ops@acme")
    world.drive()
    resolved = [r.event for r in world.client.history(run_id)
                if isinstance(r.event, ev.EscalationResolved)]
    assert [(e.by, e.resolution) for e in resolved] == [("ops@acme", "retry")]


# -- reading --------------------------------------------------------------------------------


def test_events_carry_their_chain_hashes_and_verify(world: World) -> None:
    run_id, _ = world.client.start("reminders", {"invoice": "INV-10", "amount": 1})
    world.drive()
    found = world.client.events(run_id)
    assert [e.seq for e in found] == list(range(1, len(found) + 1))
    assert all(len(e.hash) == 64 for e in found)
    assert [type(e.event) for e in found] == [type(r.event) for r in world.client.history(run_id)]
    assert world.client.verify(run_id).ok
    with pytest.raises(uw.RunNotFound):
        world.client.events("nope")
    with pytest.raises(uw.RunNotFound):
        world.client.get_run("nope")


def start_at(world: World, at: float, flow: str, run_id: str) -> None:
    world.clock.t = at
    world.client.start(flow, {"invoice": run_id, "amount": 1}, run_id=run_id)


def test_list_runs_filters_by_status_flow_and_creation_time(world: World) -> None:
    start_at(world, T0, "reminders", "a")
    start_at(world, T0 + 10, "refunds", "b")
    start_at(world, T0 + 20, "reminders", "c")
    start_at(world, T0 + 20, "reminders", "c-other")
    world.client.start("reminders", {}, run_id="other-tenant", tenant_id="acme")

    def ids(**filters: Any) -> list[str]:
        return [r.run_id for r in world.client.list_runs(**filters).runs]

    assert ids() == ["c", "c-other", "b", "a"]
    assert ids(flow="refunds") == ["b"]
    assert ids(since=T0 + 10) == ["c", "c-other", "b"]
    assert ids(until=T0 + 10) == ["a"]
    assert ids(since=T0 + 5, until=T0 + 15) == ["b"]
    assert ids(status="ready", flow="reminders") == ["c", "c-other", "a"]
    assert ids(tenant_id="acme") == ["other-tenant"]


def test_pages_follow_on_exactly_while_runs_are_created(world: World) -> None:
    for i in range(5):
        start_at(world, T0 + i // 2, "reminders", f"r{i}")  # pairs share a creation time
    # Newest first, ties by id: r4 | r2 r3 | r0 r1.
    page = world.client.list_runs(limit=2)
    seen = [[r.run_id for r in page.runs]]
    assert seen == [["r4", "r2"]] and page.next_cursor is not None
    # Created between pages: at the cursor's own time (before and after it in the order)
    # and later. Nothing shown is shown again, nothing already there is skipped.
    start_at(world, T0 + 1, "reminders", "r1z")
    start_at(world, T0 + 1, "reminders", "r2a")
    start_at(world, T0 + 9, "reminders", "new")
    while page.next_cursor is not None:
        page = world.client.list_runs(limit=2, cursor=page.next_cursor)
        seen.append([r.run_id for r in page.runs])
    assert seen == [["r4", "r2"], ["r2a", "r3"], ["r0", "r1"]]
    with pytest.raises(uw.ConfigurationError, match="invalid cursor"):
        world.client.list_runs(cursor="not-a-cursor")


def test_find_run_takes_an_id_or_a_unique_prefix(world: World) -> None:
    for run_id in ("7f3a9c01", "7f3a9c02", "7e00"):
        world.client.start("reminders", {}, run_id=run_id)
    world.client.start("reminders", {}, run_id="7e00-elsewhere", tenant_id="acme")
    assert world.client.find_run("7f3a9c01").run_id == "7f3a9c01"
    assert world.client.find_run("7e").run_id == "7e00"
    with pytest.raises(AmbiguousRunId, match=r"matches 2 runs .*7f3a9c01, 7f3a9c02") as info:
        world.client.find_run("7f3a")
    assert info.value.matches == ["7f3a9c01", "7f3a9c02"]
    with pytest.raises(uw.RunNotFound):
        world.client.find_run("8")
    with pytest.raises(uw.RunNotFound):
        world.client.find_run("")
    # A prefix is not a pattern.
    with pytest.raises(uw.RunNotFound):
        world.client.find_run("7_")


def test_connect_opens_a_store_it_closes(sqlite_url: str) -> None:
    with uw.Client.connect(sqlite_url) as client:
        run_id, _ = client.start("anything", {"free": "form"})
        assert client.state(run_id).input == {"free": "form"}
    with uw.Client.connect(sqlite_url, migrate=False) as again:
        assert [r.run_id for r in again.list_runs().runs] == [run_id]
