"""Data subjects and consent on every backend: a run's subject and purpose kept on its row
and found by subject (through intake too); consent records appended, numbered, read as
where consent stands now and as history; and nothing can change or remove a consent
record — the protocol has no method for it, and the databases refuse it to plain SQL."""

from __future__ import annotations

import sqlite3

import pytest
from builders import T0, event
from store_backends import Backend, assert_append_only

from underway.store import IntakeRequest, NewRun, Store
from underway.store.base import ConsentRecord
from underway.store.consent import ConsentStore


def new_run(run_id: str, *, tenant: str = "t1", subject: str | None = "c-1",
            purpose: str = "operations", now: float = T0) -> NewRun:
    return NewRun(
        tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=None,
        first_event=event(1, run_id, "RunStarted"), blobs={}, step="s", now=now,
        next_wake_at=now, subject=subject, purpose=purpose,
    )


def test_a_run_keeps_its_subject_and_purpose(store: Store) -> None:
    rec, created = store.create_run(new_run("r1", purpose="marketing"))
    assert created and (rec.subject, rec.purpose) == ("c-1", "marketing")
    row = store.get_run("t1", "r1")
    assert row is not None and (row.subject, row.purpose) == ("c-1", "marketing")
    store.create_run(new_run("r2", subject=None))
    row = store.get_run("t1", "r2")
    assert row is not None and (row.subject, row.purpose) == (None, "operations")
    assert [(r.run_id, r.subject) for r in store.list_runs("t1")] == [
        ("r1", "c-1"), ("r2", None)]


def test_runs_of_a_subject_oldest_first_within_the_tenant(store: Store) -> None:
    store.create_run(new_run("late", now=T0 + 5))
    store.create_run(new_run("b-early", now=T0))
    store.create_run(new_run("a-early", now=T0))
    store.create_run(new_run("someone-else", subject="c-2"))
    store.create_run(new_run("nobody", subject=None))
    store.create_run(new_run("other-tenant", tenant="t2"))
    assert [r.run_id for r in store.runs_of_subject("t1", "c-1")] == [
        "a-early", "b-early", "late"]
    assert [r.run_id for r in store.runs_of_subject("t1", "c-1", limit=2)] == [
        "a-early", "b-early"]
    assert [r.run_id for r in store.runs_of_subject("t2", "c-1")] == ["other-tenant"]
    assert store.runs_of_subject("t1", "c-9") == []
    assert store.runs_of_subject("t1", "c-1", limit=0) == []


def test_a_run_started_by_intake_keeps_its_subject(store: Store) -> None:
    rec, fresh = store.apply_intake(IntakeRequest(
        tenant_id="t1", idempotency_key="k1", entity_id="e1", event_type="created", now=T0,
        signal="created", payload=b"{}", sender="crm",
        new_run=new_run("r-intake", subject="c-7", purpose="collections"),
    ))
    assert fresh and rec is not None and rec.run_id == "r-intake"
    assert [(r.run_id, r.purpose) for r in store.runs_of_subject("t1", "c-7")] == [
        ("r-intake", "collections")]


def consent(subject: str, purpose: str, state: str, at: float, *, tenant: str = "t1",
            reference: str | None = None) -> ConsentRecord:
    return ConsentRecord(tenant, subject, purpose, state, reference, "ops@acme", at)


def test_records_are_numbered_and_the_latest_is_where_consent_stands(store: Store) -> None:
    first = store.record_consent(consent("c-1", "marketing", "granted", T0, reference="CR-1"))
    assert first.seq > 0
    assert first == ConsentRecord("t1", "c-1", "marketing", "granted", "CR-1", "ops@acme", T0,
                                  first.seq)
    store.record_consent(consent("c-1", "reminders", "granted", T0 + 1))
    last = store.record_consent(consent("c-1", "marketing", "withdrawn", T0 + 2))
    store.record_consent(consent("c-2", "marketing", "granted", T0 + 3))
    store.record_consent(consent("c-1", "marketing", "granted", T0 + 4, tenant="t2"))
    assert last.seq > first.seq
    now = store.current_consents("t1", "c-1")
    assert list(now) == ["marketing", "reminders"]
    assert (now["marketing"].state, now["marketing"].at, now["marketing"].seq) == (
        "withdrawn", T0 + 2, last.seq)
    assert now["reminders"].state == "granted"
    assert list(store.current_consents("t1", "c-1", ["marketing", "research"])) == [
        "marketing"]
    assert store.current_consents("t1", "c-1", []) == {}
    assert store.current_consents("t1", "c-9") == {}
    assert store.current_consents("t2", "c-1")["marketing"].state == "granted"


def test_history_is_every_record_oldest_first(store: Store) -> None:
    for i, state in enumerate(["granted", "withdrawn", "granted"]):
        store.record_consent(consent("c-1", "marketing", state, T0 + i))
    store.record_consent(consent("c-1", "reminders", "granted", T0 + 9))
    store.record_consent(consent("c-2", "marketing", "granted", T0 + 9))
    history = store.consent_history("t1", "c-1")
    assert [(r.purpose, r.state) for r in history] == [
        ("marketing", "granted"), ("marketing", "withdrawn"), ("marketing", "granted"),
        ("reminders", "granted")]
    assert [r.seq for r in history] == sorted(r.seq for r in history)
    assert [r.at for r in store.consent_history("t1", "c-1", purpose="marketing")] == [
        T0, T0 + 1, T0 + 2]
    assert store.consent_history("t2", "c-1") == []


@pytest.mark.parametrize("purposes", [1, 3, 40])
def test_the_latest_record_wins_for_any_number_of_purposes(store: Store,
                                                           purposes: int) -> None:
    names = [f"p{i:02d}" for i in range(purposes)]
    for i, name in enumerate(names):
        store.record_consent(consent("c-1", name, "granted", T0 + i))
    for name in names[::2]:
        store.record_consent(consent("c-1", name, "withdrawn", T0 + 100))
    now = store.current_consents("t1", "c-1", names)
    assert {n: r.state for n, r in now.items()} == {
        n: "withdrawn" if i % 2 == 0 else "granted" for i, n in enumerate(names)}


def test_the_protocol_has_no_way_to_change_or_remove_a_record() -> None:
    methods = {name for name in vars(ConsentStore) if not name.startswith("_")}
    assert methods == {"record_consent", "current_consents", "consent_history"}


def test_the_database_refuses_to_change_or_delete_a_record(backend: Backend,
                                                           store: Store) -> None:
    store.record_consent(consent("c-1", "marketing", "withdrawn", T0))
    assert_append_only(backend, "consents",
                       ("UPDATE consents SET state = 'granted'", "DELETE FROM consents"))
    if backend.name == "sqlite":
        assert backend.url is not None
        with sqlite3.connect(backend.url.removeprefix("sqlite:///")) as conn, \
                pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute("INSERT INTO consents (tenant_id, subject, purpose, state, "
                         "recorded_by, at) VALUES ('t1', 'c-1', 'marketing', 'maybe', 'x', 1)")
    assert [r.state for r in store.consent_history("t1", "c-1")] == ["withdrawn"]
