"""Reading a window of a tenant's activity, on every backend: runs created per bucket by
status (``runs_created``), the runs whose journals may hold events of a window
(``runs_written``), and a few kinds of event of many runs at once (``events_by_type``)."""

from __future__ import annotations

from builders import T0, batch, create, event, lease_of

from underway.store import RunUpdate, Store, StoredEvent
from underway.store.journal import RUN_BATCH

DAY = 86_400.0


def finish(store: Store, run_id: str, *, at: float, status: str = "completed",
           tenant: str = "t1", count: int = 1) -> None:
    """Lease the run, append ``count`` events at ``at`` and hand it back with ``status``."""
    lease = lease_of(store, run_id, tenant=tenant, now=at)
    row = store.get_run(tenant, run_id)
    assert row is not None
    store.append(batch(lease, row.last_seq, count=count, now=at, release=True,
                       update=RunUpdate(status, None, None)))


def test_runs_created_are_counted_per_bucket_by_their_status_now(store: Store) -> None:
    create(store, "a", now=T0)
    create(store, "b", now=T0 + 10)
    create(store, "c", now=T0 + DAY)  # exactly on the next bucket's start
    create(store, "d", now=T0 + DAY + 5)
    create(store, "e", now=T0 + 3 * DAY - 1)
    create(store, "early", now=T0 - 1)  # before the window
    create(store, "late", now=T0 + 3 * DAY)  # at its end: outside
    create(store, "other", tenant="t2", now=T0)
    finish(store, "b", at=T0 + 20, status="dead")
    finish(store, "d", at=T0 + DAY + 50, status="completed")
    found = store.runs_created("t1", since=T0, until=T0 + 3 * DAY, width=DAY)
    assert found == [(0, "dead", 1), (0, "ready", 1), (1, "completed", 1), (1, "ready", 1),
                     (2, "ready", 1)]
    assert store.runs_created("t2", since=T0, until=T0 + DAY, width=DAY) == [(0, "ready", 1)]
    assert store.runs_created("t3", since=T0, until=T0 + DAY, width=DAY) == []
    hourly = store.runs_created("t1", since=T0, until=T0 + DAY, width=3600.0)
    assert hourly == [(0, "dead", 1), (0, "ready", 1)]


def test_runs_written_are_those_whose_rows_moved_in_the_window_or_are_leased(
    store: Store,
) -> None:
    for run_id in ("old", "touched", "young", "later", "held"):
        create(store, run_id, now=T0)
    create(store, "born_late", now=T0 + 10 * DAY)
    create(store, "foreign", tenant="t2", now=T0)
    finish(store, "old", at=T0 + DAY)  # written before the window only
    finish(store, "touched", at=T0 + 5 * DAY)
    finish(store, "later", at=T0 + 20 * DAY)  # written after the window: may hold some
    finish(store, "foreign", at=T0 + 5 * DAY, tenant="t2")
    lease_of(store, "held", now=T0 + 5 * DAY)  # leased: its journal may be ahead of its row
    since, until = T0 + 4 * DAY, T0 + 6 * DAY
    assert store.runs_written("t1", since=since, until=until) == ["held", "later", "touched"]
    # "young" (created at T0, row written at T0) and "old" are out; "born_late" was created
    # after the window.
    assert store.runs_written("t1", since=T0, until=until) == [
        "held", "later", "old", "touched", "young"]
    assert store.runs_written("t2", since=since, until=until) == ["foreign"]
    assert store.runs_written("t9", since=since, until=until) == []


def test_events_by_type_reads_some_kinds_of_many_runs_in_order(store: Store) -> None:
    create(store, "r1")
    create(store, "r2")
    create(store, "quiet")
    create(store, "r1", tenant="t2")
    for run_id, kinds in (("r1", ["ModelResponded", "StepCompleted", "Escalated"]),
                          ("r2", ["StepCompleted", "ModelResponded", "ModelResponded"])):
        lease = lease_of(store, run_id)
        appended = batch(lease, 1, count=3)
        appended.events[:] = [StoredEvent(e.seq, kinds[i], e.payload, e.hash)
                              for i, e in enumerate(appended.events)]
        store.append(appended)
    found = store.events_by_type("t1", ["r2", "r1", "quiet", "missing"],
                                 ["ModelResponded", "Escalated", "RunStarted"])
    assert sorted(found) == ["quiet", "r1", "r2"]
    assert [e.type for e in found["quiet"]] == ["RunStarted"]
    assert [(e.seq, e.type) for e in found["r1"]] == [
        (1, "RunStarted"), (2, "ModelResponded"), (4, "Escalated")]
    assert [(e.seq, e.type) for e in found["r2"]] == [
        (1, "RunStarted"), (3, "ModelResponded"), (4, "ModelResponded")]
    assert found["r1"][1] == store.load_events("t1", "r1")[1]  # the stored bytes, hash
    only = store.events_by_type("t1", ["r1", "r2", "quiet"], ["Escalated"])
    assert list(only) == ["r1"] and [e.seq for e in only["r1"]] == [4]
    assert store.events_by_type("t1", [], ["Escalated"]) == {}
    assert store.events_by_type("t1", ["r1"], []) == {}
    assert list(store.events_by_type("t2", ["r1", "r2"], ["RunStarted"])) == ["r1"]


def test_events_by_type_reads_more_runs_than_one_query_holds(store: Store) -> None:
    names = [f"run{i:04d}" for i in range(RUN_BATCH + 3)]
    for run_id in names:
        create(store, run_id)
    found = store.events_by_type("t1", names, ["RunStarted"])
    assert sorted(found) == names
    assert all(events == [event(1, run_id, "RunStarted")] for run_id, events in found.items())
