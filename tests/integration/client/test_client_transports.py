"""``underway.Client`` behaves the same over a database URL and over HTTP: every test here runs
on a database URL (SQLite and a real PostgreSQL) and through ``underway serve`` on a real
uvicorn server on a free port (over SQLite and PostgreSQL), and asserts what a user sees.
Over HTTP the journal names the API key as who acted (:meth:`World.by`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import underway as uw
from fakes.client_world import FIXED, PACED, T0, Paced, World
from fakes.tcp_relay import Relay
from underway import events as ev
from underway.client import BulkItem, KeySigner, RunFilter
from underway.errors import AmbiguousRunId, InvalidInput, ServiceError
from underway.guard.approvals import sign_decision
from underway.runner import Runner
from underway.store.streams import StreamDelta


@pytest.fixture(params=[
    ("database", "sqlite"), pytest.param(("database", "postgres"), marks=pytest.mark.postgres),
    ("http", "sqlite"), pytest.param(("http", "postgres"), marks=pytest.mark.postgres),
], ids=["database-sqlite", "database-postgres", "http-sqlite", "http-postgres"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    transport, db = request.param
    w = World(transport, str(request.getfixturevalue(f"{'pg' if db == 'postgres' else db}_url")))
    yield w
    w.close()


def start(world: World, invoice: str = "INV-1", flow: str = "reminders",
          **options: Any) -> str:
    run_id, created = world.client.start(flow, {"invoice": invoice, "amount": 5}, **options)
    assert created
    return run_id


# -- starting -------------------------------------------------------------------------------


def test_start_finds_by_idempotency_key_and_a_worker_runs_it(world: World) -> None:
    first, created = world.client.start("reminders", {"invoice": "I", "amount": 1},
                                        idempotency_key="k-1", queue="default",
                                        subject="cust-9", labels={"region": "eu", "qty": 7})
    again, created_again = world.client.start("reminders", {"invoice": "x", "amount": 2},
                                              idempotency_key="k-1")
    assert (again, created, created_again) == (first, True, False)
    row = world.client.get_run(first)
    assert (row.tenant_id, row.flow, row.status, row.idempotency_key, row.subject) == \
        ("default", "reminders", "ready", "k-1", "cust-9")
    world.drive()
    s = world.client.state(first)
    assert s.input_checked and s.status == "waiting" and s.waiting_signal == "paid"
    assert s.state == {"seen": ["I"]}
    assert world.types(first)[:3] == ["RunStarted", "InputChecked", "StepStarted"]
    assert world.client.declared_signals(first) == frozenset({"paid"})
    assert world.client.run_labels([first]) == {first: {"region": "eu", "qty": 7}}


def test_a_start_joins_the_callers_trace(world: World) -> None:
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    run_id, _ = world.client.start("reminders", {"invoice": "T", "amount": 1},
                                   trace_context={"traceparent": parent, "tracestate": "a=1"})
    assert world.client.state(run_id).trace_context == {"traceparent": parent,
                                                        "tracestate": "a=1"}


def test_bad_starts_are_refused_naming_the_problem_and_store_nothing(world: World) -> None:
    with pytest.raises(uw.ConfigurationError, match="flow name"):
        world.client.start("no spaces please", {})
    with pytest.raises(InvalidInput, match="input"):
        world.client.start("reminders", {"at": "a\x00b"})
    with pytest.raises(uw.ConfigurationError, match="queue name must not be empty"):
        world.client.start("reminders", {}, queue="")
    assert world.client.list_runs().runs == []


def test_a_client_with_the_flows_checks_input_before_it_is_sent(world: World) -> None:
    from fakes.invoice_flows import reminders
    checked = uw.Client(world.server.url, api_key=world.key("operator", "o"),
                        flows=[reminders]) if world.server else \
        uw.Client(world.store, flows=[reminders], clock=world.clock)
    with checked:
        with pytest.raises(uw.ConfigurationError, match="invalid input for flow 'reminders'"):
            checked.start(reminders, {"invoice": "INV-3"})
        run_id, _ = checked.start(reminders, {"invoice": "INV-3", "amount": 1})
    assert world.client.state(run_id).input == {"invoice": "INV-3", "amount": 1}


# -- steering -------------------------------------------------------------------------------


def test_signal_delivers_once_per_id_and_wakes_the_run(world: World) -> None:
    run_id = start(world, "INV-4")
    world.drive()
    assert world.client.signal(run_id, "paid", {"by": "bank"}, signal_id="s-1")
    assert not world.client.signal(run_id, "paid", {"by": "bank"}, signal_id="s-1")
    with pytest.raises(uw.ConfigurationError, match="reserved"):
        world.client.signal(run_id, "underway.cancel")
    with pytest.raises(uw.ConfigurationError, match=r"takes only the signals its flow "
                       r"declares \(paid\); 'refunded' is not one of them"):
        world.client.signal(run_id, "refunded")
    with pytest.raises(uw.RunNotFound, match="no run 'no-such-run' in tenant 'default'"):
        world.client.signal("no-such-run", "paid")
    world.client.check_signal(run_id, "paid")
    with pytest.raises(uw.ConfigurationError, match="takes only the signals"):
        world.client.check_signal(run_id, "refunded")
    # The row a signal would write, checked but not written: a database client's only.
    if world.transport == "database":
        row = world.client.prepared_signal(run_id, "paid", {"by": "bank"}, signal_id="s-2")
        assert (row.run_id, row.name, row.signal_id) == (run_id, "paid", "s-2")
        with pytest.raises(uw.ConfigurationError, match="takes only the signals"):
            world.client.prepared_signal(run_id, "refunded")
    else:
        with pytest.raises(uw.ConfigurationError, match="works on a database only"):
            world.client.prepared_signal(run_id, "paid")
    with pytest.raises(InvalidInput, match="signal_id"):
        world.client.signal(run_id, "paid", signal_id="a\x00")
    world.drive()
    s = world.client.state(run_id)
    assert s.status == "completed" and s.result == {"paid": {"by": "bank"}}
    assert world.client.tainted_by(run_id) == []
    assert world.client.marks(run_id) == [] and s.marks == []


def test_cancel_is_journaled_with_who_asked_and_a_finished_run_refuses(world: World) -> None:
    run_id = start(world, "INV-5")
    world.drive()
    assert world.client.cancel(run_id, by="ops@acme", reason="customer left", signal_id="c1")
    assert not world.client.cancel(run_id, by="ops@acme", signal_id="c1")
    world.drive()
    cancelled = world.client.history(run_id)[-1].event
    assert isinstance(cancelled, ev.RunCancelled)
    assert (cancelled.by, cancelled.reason) == (world.by("ops@acme"), "customer left")
    assert world.client.get_run(run_id).status == "cancelled"
    with pytest.raises(uw.ConfigurationError,
                       match=f"run {run_id} is already cancelled; nothing to cancel"):
        world.client.cancel(run_id, by="ops")


def test_resume_and_resolve_settle_dead_and_escalated_runs(world: World) -> None:
    dead = start(world, "INV-6", flow="broken")
    waiting = start(world, "INV-7", deadline=T0 + 60)
    world.drive()
    assert world.client.get_run(dead).status == "dead"
    assert world.client.waiting_on(world.client.get_run(dead)) == "a person to resume it"
    with pytest.raises(uw.ConfigurationError, match=f"run {dead} is dead, not escalated"):
        world.client.resolve(dead, resolution="retry", by="ops")
    with pytest.raises(uw.ConfigurationError, match="resolution must be"):
        world.client.resolve(dead, resolution="maybe", by="ops")
    FIXED.append(True)
    assert world.client.resume(dead, by="ops@acme")
    world.clock.advance(61)
    world.drive()
    resumed = [r.event for r in world.client.history(dead) if isinstance(r.event, ev.RunResumed)]
    assert [e.by for e in resumed] == [world.by("ops@acme")]
    assert world.client.state(dead).result == "parsed"
    with pytest.raises(uw.ConfigurationError, match="only dead runs can be resumed"):
        world.client.resume(dead, by="ops")

    assert world.client.get_run(waiting).status == "escalated"
    request = world.client.pending_request(waiting)
    assert request is not None and (request.kind, request.cause) == ("resolution", "deadline")
    assert world.client.resolve(waiting, resolution="retry", by="ops@acme")
    world.drive()
    resolved = [r.event for r in world.client.history(waiting)
                if isinstance(r.event, ev.EscalationResolved)]
    assert [(e.by, e.resolution) for e in resolved] == [(world.by("ops@acme"), "retry")]


def test_a_signed_only_client_refuses_unsigned_settling_up_front(world: World) -> None:
    dead = start(world, "INV-8", flow="broken")
    world.drive()
    assert not world.client.signed_resolutions
    assert world.client.signed_only().signed_resolutions
    with pytest.raises(uw.errors.SignedResolutionRequired, match=f"run {dead}: "):
        world.client.signed_only().resume(dead, by="ops")
    assert world.client.get_run(dead).status == "dead"


# -- approvals ------------------------------------------------------------------------------


def test_a_submitted_signed_approval_lets_the_call_run(world: World) -> None:
    key = world.approver("alice", "finance")
    run_id = start(world, "INV-9", flow="refunds")
    world.drive()
    [request] = world.client.pending_requests()
    assert (request.run_id, request.kind, request.tool) == (run_id, "approval", "refund")
    assert request.args == {"invoice": "INV-9", "amount": 5}
    assert request.required_role == "finance" and request.expires_at == T0 + 3600
    assert world.client.pending_request(run_id) == request
    assert world.client.waiting_on(world.client.get_run(run_id)) == "approval by finance"
    decision = sign_decision(
        key, request_id=request.request_id, run_id=run_id, tenant_id="default",
        tool=request.tool, args_hash=request.args_hash, decision="approve",
        expires_at=request.expires_at, approver_id="alice", comment="ok",
    ).model_dump(mode="json")
    with pytest.raises(uw.ConfigurationError, match=r"would be refused: .*signature"):
        world.deciding.submit_decision(dict(decision, args_hash="0" * 64))
    with pytest.raises(uw.ConfigurationError, match="not a valid signed decision"):
        world.deciding.submit_decision({"run_id": run_id})
    assert world.deciding.submit_decision(decision)
    assert not world.deciding.submit_decision(decision)
    world.drive()
    assert world.client.state(run_id).result == {"refunded": "INV-9"}
    assert world.client.pending_requests() == []
    assert world.client.pending_request(run_id) is None


def test_decide_and_answer_sign_here_and_the_runs_act(world: World) -> None:
    key = world.approver("alice", "finance", "ops")
    refund = start(world, "INV-10", flow="refunds")
    asks = start(world, "INV-11", flow="asker")
    world.drive()
    with pytest.raises(uw.ConfigurationError, match="not the one registered"):
        world.deciding.decide(refund, "approve", key=key, approver_id="bob")
    with pytest.raises(uw.ConfigurationError, match="waits for an approval, not an answer"):
        world.deciding.answer(refund, "Pune", key=key, approver_id="alice")
    signed = world.deciding.decide(refund[:12], "approve", key=key, approver_id="alice",
                                   comment="fine")
    assert (signed.run_id, signed.decision) == (refund, "approve")
    assert world.client.waiting_on(world.client.get_run(asks)) == "an answer from ops"
    world.deciding.answer(asks, "Pune", key=key, approver_id="alice")
    world.drive()
    assert world.client.state(refund).result == {"refunded": "INV-10"}
    assert world.client.state(asks).result == {"warehouse": "Pune"}


def test_bulk_selects_by_the_runs_filter_and_acts_once(world: World) -> None:
    runs = [start(world, f"INV-{i}", labels={"batch": "b1"}) for i in range(3)]
    other = start(world, "INV-x", labels={"batch": "b2"})
    world.drive()
    chosen = RunFilter(labels={"batch": "b1"})
    seen: list[BulkItem] = []
    dry = world.client.bulk("cancel", chosen, by="ops")
    assert dry.dry_run and sorted(dry.ids("eligible")) == sorted(runs)
    done = world.client.bulk("cancel", chosen, by="ops", dry_run=False, reason="batch gone",
                             on_item=seen.append)
    assert sorted(done.ids("done")) == sorted(runs) and len(seen) == 3
    assert done.counts == {"done": 3, "eligible": 0, "skipped": 0, "failed": 0}
    again = world.client.bulk("cancel", chosen, by="ops", dry_run=False)
    assert again.ids("done") == [] and len(again.ids("skipped")) == 3
    world.drive()
    assert {world.client.get_run(r).status for r in runs} == {"cancelled"}
    assert world.client.get_run(other).status == "waiting"
    with pytest.raises(uw.ConfigurationError, match="unknown bulk action"):
        world.client.bulk("explode", chosen, by="ops")  # type: ignore[arg-type]


def test_bulk_approve_signs_each_run_here(world: World) -> None:
    key = world.approver("alice", "finance")
    runs = [start(world, f"INV-{i}", flow="refunds") for i in range(2)]
    world.drive()
    signer = KeySigner(key, approver_id="alice", clock=world.clock.now)
    with pytest.raises(uw.ConfigurationError, match="give a signer"):
        world.deciding.bulk("approve", RunFilter(), by="alice")
    dry = world.deciding.bulk("approve", RunFilter(), by="alice", signer=signer)
    assert sorted(dry.ids("eligible")) == sorted(runs)
    assert all(i.request_id for i in dry.items)
    done = world.deciding.bulk("approve", RunFilter(), by="alice", signer=signer,
                               dry_run=False)
    assert sorted(done.ids("done")) == sorted(runs)
    world.drive()
    assert [world.client.state(r).status for r in runs] == ["completed", "completed"]


# -- reading --------------------------------------------------------------------------------


def test_events_states_and_verification_read_the_same(world: World) -> None:
    run_id = start(world, "INV-12")
    world.drive()
    world.client.signal(run_id, "paid", {"amount": 5})
    world.drive()
    found = world.client.events(run_id)
    assert [e.seq for e in found] == list(range(1, len(found) + 1))
    assert all(len(e.hash) == 64 for e in found)
    assert [type(e.event) for e in found] == [type(r.event) for r in world.client.history(run_id)]
    assert [e.seq for e in world.client.events(run_id, after=2, limit=2)] == [3, 4]
    assert world.client.verify(run_id).ok
    assert world.client.verify(run_id).events == len(found)
    before, at, after = world.client.state_at(run_id, 2)
    assert (before.seq, at.seq, after.seq) == (1, 2, 2)
    assert isinstance(at.event, ev.InputChecked) and after.input_checked
    with pytest.raises(uw.ConfigurationError, match="has no event at seq 99"):
        world.client.state_at(run_id, 99)
    with pytest.raises(uw.ConfigurationError, match="start at seq 1"):
        world.client.state_at(run_id, 0)
    assert world.client.readable_state(run_id).result == {"paid": {"amount": 5}}
    assert world.client.children(run_id) == []
    spawner = start(world, "P-1", flow="parent")
    world.drive()
    [child] = world.client.children(spawner)
    assert (child.flow, child.key, child.detached, child.status) == \
        ("reminders", "first", False, "waiting")
    assert world.client.get_run(child.run_id).flow == "reminders"
    assert world.client.verify("nope") == uw.client.Verification(
        "default", "nope", False, 0, None, "no such run")
    for read in (world.client.events, world.client.get_run, world.client.state,
                 world.client.history):
        with pytest.raises(uw.RunNotFound, match="no run 'nope' in tenant 'default'"):
            read("nope")


def test_list_runs_filters_and_pages_follow_on(world: World) -> None:
    for i in range(5):
        world.clock.t = T0 + i // 2
        start(world, f"r{i}", flow="refunds" if i == 4 else "reminders")
    ids = {r.run_id: r for r in world.client.list_runs().runs}
    assert len(ids) == 5
    assert [r.flow for r in world.client.list_runs(flow="refunds").runs] == ["refunds"]
    assert len(world.client.list_runs(since=T0 + 1).runs) == 3
    assert len(world.client.list_runs(until=T0 + 1).runs) == 2
    assert world.client.list_runs(status="completed").runs == []
    first = world.client.list_runs(limit=2)
    assert len(first.runs) == 2 and first.next_cursor is not None
    seen = [r.run_id for r in first.runs]
    page = first
    while page.next_cursor is not None:
        page = world.client.list_runs(limit=2, cursor=page.next_cursor)
        seen += [r.run_id for r in page.runs]
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    prefix = seen[0][:8]
    assert world.client.find_run(prefix).run_id == seen[0]
    assert [r.run_id for r in world.client.list_runs(id_prefix=prefix).runs] == [seen[0]]
    assert [r.flow for r in world.client.list_runs(search="refu").runs] == ["refunds"]
    assert len(world.client.list_runs(updated_since=T0 + 2).runs) == 1
    assert len(world.client.list_runs(updated_until=T0 + 2).runs) == 4
    with pytest.raises(uw.ConfigurationError, match="limit must be at least 1, not 0"):
        world.client.list_runs(limit=0)
    with pytest.raises(uw.ConfigurationError, match="invalid cursor"):
        world.client.list_runs(cursor="bm90LWEtY3Vyc29y")


def test_find_run_takes_an_id_or_a_unique_prefix(world: World) -> None:
    runs = [start(world, f"F{i}") for i in range(12)]
    assert world.client.find_run(runs[0]).run_id == runs[0]
    with pytest.raises(AmbiguousRunId, match="matches"):
        world.client.find_run(_shared(runs))
    with pytest.raises(uw.RunNotFound):
        world.client.find_run("zz")
    with pytest.raises(uw.RunNotFound):
        world.client.find_run("")


def _shared(runs: list[str]) -> str:
    """A prefix two of ``runs`` share (hex ids: among 12, two share a first digit)."""
    by_first: dict[str, list[str]] = {}
    for r in runs:
        by_first.setdefault(r[0], []).append(r)
    return next(k for k, v in by_first.items() if len(v) > 1)


def test_consents_and_a_subjects_runs(world: World) -> None:
    granted = world.client.grant_consent("cust-1", "marketing", by="crm", reference="form-7")
    assert (granted.subject, granted.purpose, granted.state, granted.reference) == \
        ("cust-1", "marketing", "granted", "form-7")
    world.clock.advance(1)
    world.client.withdraw_consent("cust-1", "marketing", by="crm")
    world.client.grant_consent("cust-1", "billing", by="crm")
    now = world.client.consents("cust-1")
    assert {p: r.state for p, r in now.items()} == {"marketing": "withdrawn",
                                                     "billing": "granted"}
    history = world.client.consent_history("cust-1", purpose="marketing")
    assert [r.state for r in history] == ["granted", "withdrawn"]
    assert history[0].by == world.by("crm")
    with pytest.raises(uw.ConfigurationError, match="subject"):
        world.client.grant_consent("has space", "marketing", by="crm")
    run_id = start(world, "S-1", subject="cust-1")
    start(world, "S-2", subject="cust-2")
    assert [r.run_id for r in world.client.runs_of_subject("cust-1")] == [run_id]


def test_fork_starts_a_new_run_from_a_state(world: World) -> None:
    run_id = start(world, "INV-13")
    world.drive()
    fork = world.client.fork(run_id, at_seq=3, by="ops", reason="what if",
                             state_patch={"seen": ["patched"]})
    assert (fork.parent_run_id, fork.seq, fork.step) == (run_id, 3, "remind")
    s = world.client.state(fork.run_id)
    assert s.state == {"seen": ["patched"]} and s.status == "ready"
    forked = world.client.history(run_id)[-1].event
    assert isinstance(forked, ev.RunForked) and forked.by == world.by("ops")
    with pytest.raises(uw.ConfigurationError, match="has no event at seq 99"):
        world.client.fork(run_id, at_seq=99, by="ops")
    with pytest.raises(uw.RunNotFound):
        world.client.fork("nope", at_seq=1, by="ops")


def test_activity_counts_the_tenants_runs(world: World) -> None:
    start(world, "A-1")
    start(world, "A-2", flow="broken")
    world.drive()
    act = world.client.activity(since=T0 - 10, days=1)
    [day] = act.days
    assert day.runs == {"waiting": 1, "dead": 1}
    assert day.dead_lettered == 1
    hourly = world.client.activity(since=T0 - 10, days=1, hourly=True)
    assert len(hourly.days) == 24


def test_connect_opens_what_close_closes(world: World) -> None:
    url, key = (world.server.url, world.key("viewer", "v")) if world.server else \
        (world.url, None)
    run_id = start(world, "C-1")
    with uw.Client.connect(url, api_key=key, clock=world.clock) as opened:
        assert opened.clock is world.clock
        assert opened.get_run(run_id).status == "ready"
    opened.close()  # closing twice is harmless


# -- live streams ---------------------------------------------------------------------------

WORDS = [{"type": "text", "text": w} for w in ("once ", "upon ", "a ", "time")] + \
    [{"type": "done"}]


async def collect(deltas: AsyncIterator[StreamDelta]) -> list[StreamDelta]:
    return [d async for d in deltas]


def test_a_finished_runs_live_stream_reads_the_same_by_offset(world: World) -> None:
    run_id = start(world, "S-1", flow="teller")
    assert world.client.read_stream(run_id) == []
    assert world.client.stream_page(run_id, 0) == ([], False), "not finished: more may come"
    world.drive()
    got = world.client.read_stream(run_id)
    assert [d.delta for d in got] == WORDS
    assert {(d.step, d.index, d.attempt) for d in got} == {("tell", 0, 1)}
    offsets = [d.offset for d in got]
    assert offsets == sorted(set(offsets))
    assert world.client.read_stream(run_id, after=offsets[1], limit=2) == got[2:4]
    assert world.client.stream_page(run_id, 0) == (got, False)
    assert world.client.stream_page(run_id, offsets[-1]) == ([], True)
    assert world.client.stream_page(run_id, offsets[0], limit=1) == (got[1:2], False)
    assert asyncio.run(collect(world.client.stream(run_id))) == got
    assert asyncio.run(collect(world.client.stream(run_id, after=offsets[2]))) == got[3:]
    assert asyncio.run(collect(world.client.stream(run_id, after=offsets[1],
                                                   follow=False))) == got[2:]
    assert world.client.get_run(run_id).status == "completed"


def test_a_reader_follows_the_model_answering_and_resumes_after_its_offset(
        world: World) -> None:
    model = Paced()
    PACED.append(model)
    run_id = start(world, "S-2", flow="teller")
    first: list[StreamDelta] = []
    rest: list[StreamDelta] = []

    async def follow() -> None:
        # The reader leaves after the first word, while the model waits, keeping its offset.
        async for d in world.client.stream(run_id):
            first.append(d)
            break
        assert await collect(world.client.stream(run_id, after=first[-1].offset,
                                                 follow=False)) == []
        model.seen.set()
        async for d in world.client.stream(run_id, after=first[-1].offset):
            rest.append(d)

    async def both() -> None:
        await asyncio.gather(Runner(world.engine).run_until_idle(), follow())

    asyncio.run(both())
    assert [d.delta for d in first + rest] == WORDS, "each delta once, in order"
    offsets = [d.offset for d in first + rest]
    assert offsets == sorted(set(offsets))
    assert world.client.state(run_id).result == {"text": "once upon a time"}


def test_a_dropped_connection_is_reopened_after_the_last_offset(world: World) -> None:
    if world.server is None:
        return  # a database client holds no connection to drop
    model = Paced()
    PACED.append(model)
    run_id = start(world, "S-5", flow="teller")
    got: list[StreamDelta] = []
    with Relay(world.server.url) as relay:
        async def follow() -> None:
            with uw.Client(relay.url, api_key=world.key("viewer", "r")) as reader:
                async for d in reader.stream(run_id):
                    got.append(d)
                    if len(got) == 1:
                        before = relay.accepted
                        relay.cut()  # mid-answer: the model waits for this reader
                        model.seen.set()
                assert relay.accepted > before, "the stream was opened again"

        async def both() -> None:
            await asyncio.gather(Runner(world.engine).run_until_idle(), follow())

        asyncio.run(both())
    assert [d.delta for d in got] == WORDS, "each delta once, across the reconnect"


def test_stream_reads_refuse_an_unknown_run_and_another_tenants(world: World) -> None:
    other, _ = world.engine.start("teller", {"invoice": "S-3", "amount": 1},
                                  tenant_id="globex")
    world.drive()
    assert [d.delta for d in world.engine.client.read_stream(other, tenant_id="globex")] \
        == WORDS
    for run_id in ("nope", other):
        missing = rf"no run '{run_id}' in tenant 'default'"
        with pytest.raises(uw.RunNotFound, match=missing):
            world.client.read_stream(run_id)
        with pytest.raises(uw.RunNotFound, match=missing):
            world.client.stream_page(run_id, 0)
        for follow in (True, False):
            with pytest.raises(uw.RunNotFound, match=missing):
                asyncio.run(collect(world.client.stream(run_id, follow=follow)))


def test_a_revoked_key_ends_an_open_stream_as_it_refuses_any_read(world: World) -> None:
    if world.server is None:
        return  # a database client has no key to revoke
    model = Paced()
    PACED.append(model)
    token = world.key("viewer", "reader")
    run_id = start(world, "S-4", flow="teller")
    seen: list[StreamDelta] = []

    async def follow() -> None:
        with uw.Client(world.server.url, api_key=token) as reader:  # type: ignore[union-attr]
            with pytest.raises(ServiceError, match="refused the API key") as refused:
                async for d in reader.stream(run_id):
                    seen.append(d)
                    assert world.store.revoke_api_key("default", token.split("_")[1],
                                                      at=world.clock.now())
            assert refused.value.status == 401
            model.seen.set()
            with pytest.raises(ServiceError, match="refused the API key"):
                reader.read_stream(run_id)

    async def both() -> None:
        await asyncio.gather(Runner(world.engine).run_until_idle(), follow())

    asyncio.run(both())
    assert [d.delta for d in seen] == WORDS[:1], "nothing read after the revocation is sent"


# -- what works on a database only ----------------------------------------------------------


@pytest.mark.parametrize("use", ["store", "codec", "prepare_start", "redactor", "_send"])
def test_what_needs_the_database_says_so_over_http(world: World, use: str) -> None:
    calls = {"store": lambda: world.client.store, "codec": lambda: world.client.codec,
             "prepare_start": lambda: world.client.prepare_start("reminders", {}),
             "redactor": lambda: world.client.redactor("r"),
             "_send": lambda: world.client._send("r", "paid", None, "default", None, None)}
    if world.transport == "database":
        return
    with pytest.raises(uw.ConfigurationError, match=rf"Client\.{use} works on a database "
                       r"only, not over HTTP \(http://127\.0\.0\.1:\d+\): "):
        calls[use]()


def test_every_public_method_of_the_client_is_exercised_here() -> None:
    """The suite above calls each public method (and reads each public property) of
    :class:`~underway.Client`, so each is proven on both transports."""
    source = Path(__file__).read_text()
    public = [n for n in dir(uw.Client) if not n.startswith("_")]
    missing = [n for n in public
               if not re.search(rf"\b(client|deciding|Client|opened)\.{n}\b", source)]
    assert len(public) > 40 and missing == []
