"""``Client.bulk``: one action on every run a filter selects, each run acted on once, with
the operator journaled per run. Every test runs on SQLite and a real PostgreSQL."""

from __future__ import annotations

import threading
import time

import pytest
from bulk_world import World

import underway as uw
from fakes import bulk_flows
from fakes.bulk_flows import QUESTION
from fakes.invoice_flows import refunds
from underway import events as ev
from underway.client import BulkItem, KeySigner, RunFilter
from underway.errors import SignedResolutionRequired


def _quiet(world: World, run_ids: list[str]) -> dict[str, tuple[str, int]]:
    """Each run's status and journal length: what must not move under a dry run."""
    return {r: (world.status(r), len(world.client.history(r))) for r in run_ids}


def test_nine_dead_runs_resume_in_one_call_and_all_finish(world: World) -> None:
    dead = world.start("brittle", 9)
    others = world.start("asking", 2)
    assert {world.status(r) for r in dead} == {"dead"}
    bulk_flows.OUTAGE[0] = False  # the supplier is back

    report = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops@acme",
                               dry_run=False)
    assert report.counts == {"done": 9, "eligible": 0, "skipped": 0, "failed": 0}
    assert sorted(report.ids("done")) == sorted(dead)
    world.drive()

    for run_id in dead:
        assert world.status(run_id) == "completed"
        # One journaled action per run, naming who did it.
        assert [e.by for e in world.events(run_id, ev.RunResumed)] == ["ops@acme"]
        assert world.events(run_id, ev.SignalIgnored) == []
    assert {world.status(r) for r in others} == {"escalated"}


def test_a_dry_run_counts_and_changes_nothing(world: World) -> None:
    dead = world.start("brittle", 3)
    before = _quiet(world, dead)
    report = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops")
    assert report.dry_run and report.counts["eligible"] == 3
    assert sorted(report.ids("eligible")) == sorted(dead)
    bulk_flows.OUTAGE[0] = False
    world.drive()
    assert _quiet(world, dead) == before
    assert all(world.client.store.pending_signals("default", r) == [] for r in dead)


def test_a_filter_that_matches_nothing_acts_on_nothing(world: World) -> None:
    dead = world.start("brittle", 2)
    for chosen in (RunFilter(flow="no-such-flow"), RunFilter(flow="brittle", since=4e9),
                   RunFilter(status="completed")):
        report = world.client.bulk("resume", chosen, by="ops", dry_run=False)
        assert report.items == [] and report.counts["done"] == 0
    assert {world.status(r) for r in dead} == {"dead"}


def test_twenty_eight_questions_are_answered_with_one_call(world: World) -> None:
    key = world.approver("priya", "support")
    waiting = world.start("asking", 28)
    other_tenant = world.start("asking", 1, tenant="acme")
    assert {world.status(r) for r in waiting} == {"escalated"}
    signer = KeySigner(key, approver_id="priya", comment="stock moved to Pune")

    report = world.client.bulk("answer", RunFilter(flow="asking"), by="priya",
                               question=QUESTION, answer="Pune", signer=signer,
                               dry_run=False)
    assert report.counts["done"] == 28
    world.drive()

    for run_id in waiting:
        assert world.client.state(run_id).result == {"sku": world.client.state(
            run_id).input["sku"], "warehouse": "Pune"}
        [answered] = world.events(run_id, ev.EscalationAnswered)
        assert (answered.approver_id, answered.answer) == ("priya", "Pune")
    assert world.status(other_tenant[0], tenant="acme") == "escalated"


def test_an_answer_to_another_question_is_skipped_and_needs_a_signer(world: World) -> None:
    key = world.approver("priya", "support")
    waiting = world.start("asking", 2)
    with pytest.raises(uw.ConfigurationError, match="signer"):
        world.client.bulk("answer", RunFilter(), by="x", question=QUESTION, answer="A")
    report = world.client.bulk("answer", RunFilter(), by="priya", question="Ship today?",
                               answer="yes", signer=KeySigner(key, approver_id="priya"),
                               dry_run=False)
    assert report.counts["skipped"] == 2
    assert all("asks another question" in i.reason for i in report.items)
    world.drive()
    assert {world.status(r) for r in waiting} == {"escalated"}


def test_a_run_that_finishes_between_selection_and_action_is_skipped(world: World) -> None:
    dead = world.start("brittle", 4)
    newest_first = world.client.list_runs().runs
    first, victim = newest_first[0].run_id, newest_first[2].run_id
    moved: list[str] = []

    def meanwhile(item: BulkItem) -> None:
        # After the first run's action, someone else cancels a run selected on this page.
        if item.run_id == first and not moved:
            world.client.cancel(victim, by="someone-else")
            world.drive()
            moved.append(victim)

    bulk_flows.OUTAGE[0] = False
    report = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops",
                               dry_run=False, on_item=meanwhile)
    by_run = {i.run_id: i for i in report.items}
    assert by_run[victim].outcome == "skipped"
    assert by_run[victim].reason == "it is cancelled, not dead"
    assert report.counts["done"] == 3
    world.drive()
    assert world.status(victim) == "cancelled"
    assert world.events(victim, ev.RunResumed) == []
    assert {world.status(r) for r in dead if r != victim} == {"completed"}


def test_two_concurrent_bulk_operations_act_once_per_run(world: World) -> None:
    dead = world.start("brittle", 9)
    start = threading.Barrier(2)
    reports = []

    def operate(name: str) -> None:
        client = uw.Client(uw.connect(world.url, migrate=False))
        try:
            start.wait()
            reports.append(client.bulk("resume", RunFilter(flow="brittle"), by=name,
                                       dry_run=False, page_size=2))
        finally:
            client.store.close()

    threads = [threading.Thread(target=operate, args=(f"ops-{i}",)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(reports) == 2
    assert sum(r.counts["done"] for r in reports) == 9
    assert sum(r.counts["failed"] for r in reports) == 0
    bulk_flows.OUTAGE[0] = False
    world.drive()
    for run_id in dead:
        assert world.status(run_id) == "completed"
        assert len(world.events(run_id, ev.RunResumed)) == 1
        assert world.events(run_id, ev.SignalIgnored) == []


def test_a_second_operation_nested_in_the_first_acts_on_nothing_twice(world: World) -> None:
    dead = world.start("brittle", 5)
    inner: list[int] = []

    def interleave(item: BulkItem) -> None:
        if not inner:
            again = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops-2",
                                      dry_run=False)
            inner.append(again.counts["done"])

    outer = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops-1",
                              dry_run=False, on_item=interleave, page_size=1)
    assert inner == [4] and outer.counts == {"done": 1, "eligible": 0, "skipped": 4,
                                             "failed": 0}
    bulk_flows.OUTAGE[0] = False
    world.drive()
    assert all(len(world.events(r, ev.RunResumed)) == 1 for r in dead)


def test_resolving_in_bulk_settles_each_escalation_once(world: World) -> None:
    lost = world.start("lost", 3)
    asking = world.start("asking", 1)
    with pytest.raises(uw.ConfigurationError, match="resolution"):
        world.client.bulk("resolve", RunFilter(), by="ops")
    report = world.client.bulk("resolve", RunFilter(), by="ops@acme", resolution="failed",
                               dry_run=False)
    assert sorted(report.ids("done")) == sorted(lost)
    assert [i.reason for i in report.items if i.outcome == "skipped"] == [
        "it waits for a question"]
    world.drive()
    for run_id in lost:
        [resolved] = world.events(run_id, ev.EscalationResolved)
        assert (resolved.resolution, resolved.by) == ("failed", "ops@acme")
        assert world.status(run_id) != "escalated"
    assert world.status(asking[0]) == "escalated"


def test_cancelling_in_bulk_skips_finished_runs(world: World) -> None:
    asking = world.start("asking", 3)
    bulk_flows.OUTAGE[0] = False
    done = world.start("brittle", 1)
    report = world.client.bulk("cancel", RunFilter(), by="ops", reason="recall",
                               dry_run=False)
    assert sorted(report.ids("done")) == sorted(asking)
    assert [i.reason for i in report.items if i.run_id == done[0]] == [
        "it is already completed"]
    world.drive()
    for run_id in asking:
        [cancelled] = world.events(run_id, ev.RunCancelled)
        assert (world.status(run_id), cancelled.by, cancelled.reason) == (
            "cancelled", "ops", "recall")


def test_signed_resolutions_refuse_an_unsigned_bulk_resume_and_take_signed_ones(
    world: World,
) -> None:
    dead = world.start("brittle", 3)
    strict = world.client.signed_only()
    with pytest.raises(SignedResolutionRequired, match="Sign one per run"):
        strict.bulk("resume", RunFilter(), by="ops", dry_run=False)
    assert all(world.client.store.pending_signals("default", r) == [] for r in dead)

    key = world.approver("lead", "ops")
    report = strict.bulk("resume", RunFilter(), by="lead", dry_run=False,
                         signer=KeySigner(key, approver_id="lead"))
    assert report.counts["done"] == 3
    bulk_flows.OUTAGE[0] = False
    world.engine.guard.signed_resolutions = True
    world.drive()
    for run_id in dead:
        [resumed] = world.events(run_id, ev.RunResumed)
        assert resumed.decision is not None and resumed.decision["approver_id"] == "lead"
        assert world.status(run_id) == "completed"


def test_a_bulk_operation_stays_in_its_tenant(world: World) -> None:
    ours = world.start("brittle", 2)
    theirs = world.start("brittle", 2, tenant="acme")
    report = world.client.bulk("cancel", RunFilter(), by="ops", dry_run=False)
    assert sorted(report.ids("done")) == sorted(ours)
    world.drive()
    assert {world.status(r, tenant="acme") for r in theirs} == {"dead"}


def test_approving_in_bulk_signs_each_held_call_for_its_own_run(world: World) -> None:
    world.engine.register(refunds)
    key = world.approver("meera", "finance")
    held = [world.client.start("refunds", {"invoice": f"INV-{i}", "amount": 10 + i})[0]
            for i in range(4)]
    world.drive()
    assert {world.status(r) for r in held} == {"waiting"}
    with pytest.raises(uw.ConfigurationError, match="signer"):
        world.client.bulk("approve", RunFilter(), by="meera")
    dry = world.client.bulk("approve", RunFilter(flow="refunds"), by="meera",
                            signer=KeySigner(key, approver_id="meera"))
    requests = {i.run_id: i.request_id for i in dry.items}
    assert set(requests) == set(held) and None not in requests.values()

    report = world.client.bulk("approve", RunFilter(flow="refunds"), by="meera",
                               signer=KeySigner(key, approver_id="meera"), dry_run=False)
    assert report.counts["done"] == 4
    world.drive()
    for run_id in held:
        [granted] = world.events(run_id, ev.ApprovalGranted)
        assert granted.approver_id == "meera" and granted.request_id == requests[run_id]
        assert world.status(run_id) == "completed"


def test_two_operations_past_the_inbox_check_at_once_still_send_one_action(
    world: World, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race the inbox check cannot close: two operations both find the inbox empty,
    then both send. The signal id (unsigned) and the decision itself (signed) are the
    same for both, so the store keeps one."""
    from underway.client import _bulk

    dead = world.start("brittle", 3)
    asking = world.start("asking", 3)
    key = world.approver("priya", "support")
    now = time.time()  # (one hour for both signings: a decision with no expiry is valid a day)
    monkeypatch.setattr(_bulk, "_sent", lambda *args: False)
    for by in ("ops-1", "ops-2"):
        world.client.bulk("resume", RunFilter(flow="brittle"), by=by, dry_run=False)
        world.client.bulk("answer", RunFilter(flow="asking"), by="priya", question=QUESTION,
                          answer="Pune", signer=KeySigner(key, approver_id="priya",
                                                          clock=lambda: now),
                          dry_run=False)
    second = world.client.bulk("resume", RunFilter(flow="brittle"), by="ops-3", dry_run=False)
    assert [i.reason for i in second.items] == ["this resume was sent before"] * 3
    bulk_flows.OUTAGE[0] = False
    world.drive()
    for run_id in dead:
        assert [e.by for e in world.events(run_id, ev.RunResumed)] == ["ops-1"]
        assert world.events(run_id, ev.SignalIgnored) == []
    for run_id in asking:
        assert len(world.events(run_id, ev.EscalationAnswered)) == 1
        assert world.events(run_id, ev.ApprovalInvalid) == []


def test_two_concurrent_bulk_answers_answer_each_run_once(world: World) -> None:
    asking = world.start("asking", 12)
    key = world.approver("priya", "support")
    now = time.time()
    signer = KeySigner(key, approver_id="priya", clock=lambda: now)
    start = threading.Barrier(2)
    reports = []

    def operate() -> None:
        client = uw.Client(uw.connect(world.url, migrate=False))
        try:
            start.wait()
            reports.append(client.bulk(
                "answer", RunFilter(flow="asking"), by="priya", question=QUESTION,
                answer="Pune", signer=signer, dry_run=False, page_size=3))
        finally:
            client.store.close()

    threads = [threading.Thread(target=operate) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.counts["done"] for r in reports) == 12
    world.drive()
    for run_id in asking:
        assert len(world.events(run_id, ev.EscalationAnswered)) == 1
        assert world.events(run_id, ev.ApprovalInvalid) == []
        assert world.status(run_id) == "completed"


def test_a_decision_the_run_would_refuse_fails_before_it_is_sent(world: World) -> None:
    waiting = world.start("asking", 3)
    key = world.approver("sam", "sales")  # the question asks for the support role
    report = world.client.bulk("answer", RunFilter(), by="sam", question=QUESTION,
                               answer="Pune", signer=KeySigner(key, approver_id="sam"),
                               dry_run=False)
    assert report.counts["failed"] == 3
    assert all("the approver lacks the role the request requires" in i.reason
               for i in report.items)
    assert all(world.client_store.pending_signals("default", r) == [] for r in waiting)


def test_bad_options_are_refused_before_any_run_is_touched(world: World) -> None:
    asking = world.start("asking", 2)
    for action, options, problem in (
        ("cancel", {"reason": "recall\x00"}, "reason: holds a NUL character"),
        ("frobnicate", {}, "unknown bulk action 'frobnicate'"),
        ("resolve", {"resolution": "maybe"}, "needs a resolution"),
        ("answer", {"question": QUESTION, "answer": None,
                    "signer": KeySigner(world.approver("p", "support"), approver_id="p")},
         "needs the answer"),
    ):
        with pytest.raises(uw.ConfigurationError, match=problem):
            world.client.bulk(action, RunFilter(), by="ops", dry_run=False,
                              **options)
    with pytest.raises(uw.ConfigurationError, match="page_size must be at least 1"):
        world.client.bulk("cancel", RunFilter(), by="ops", dry_run=False, page_size=0)
    assert all(world.client_store.pending_signals("default", r) == [] for r in asking)
