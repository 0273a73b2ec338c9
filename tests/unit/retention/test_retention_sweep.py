"""A retention sweep on the in-memory store: finished runs past their period lose their
payloads and keep a skeleton that verifies (and still fails verification when edited);
live, dead and held runs are left alone; usage still adds up; blobs nothing refers to are
collected, the live run's kept; the sweep is logged."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import underway as uw
from fakes.retention_world import CANARIES, DAY, THEN, Notes, make_runs
from underway.cli._timeline import render
from underway.events import PayloadPurged, Tombstone, genesis_hash, read_tombstone
from underway.guard.approvals import generate_keypair, load_private_key, write_private_key
from underway.guard.budgets import tenant_usage
from underway.ops import audit
from underway.privacy.retention import Retention, sweep
from underway.store import MemoryStore, StoredEvent
from underway.store.base import HoldRecord
from underway.store.regional import RegionalStore

NOW = THEN + 10 * DAY
RULES = Retention(completed=5 * DAY, blob_grace=0.0)


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore()
    s.migrate()
    return s


def sweep_at(store: MemoryStore, rules: Retention = RULES, at: float = NOW,
             **options: Any) -> Any:
    return sweep(store, rules, clock=uw.ManualClock(at), **options)


def dump(store: MemoryStore, run_id: str) -> bytes:
    """Everything the store holds of a run: events, checkpoint, signals, row."""
    key = ("default", run_id)
    parts = [e.payload for e in store._events[key]]
    parts.append(repr(store._checkpoints.get(key)).encode())
    parts.append(repr(store._signals.get(key)).encode())
    parts.append(repr(store._runs[key]).encode())
    return b"\n".join(parts)


def canaries(data: bytes) -> list[str]:
    return [c for c in CANARIES if c.encode() in data]


def test_finished_runs_past_their_period_keep_only_a_skeleton(store: MemoryStore) -> None:
    runs = make_runs(store)
    before = {name: store.load_events("default", rid) for name, rid in runs.items()}
    assert all(canaries(dump(store, rid)) for rid in runs.values())
    report = sweep_at(store)
    [done] = report.tenants
    assert sorted(o.run_id for o in done.outcomes if o.action == "purged") == sorted(
        [runs["letter"], runs["letter_ann"]])
    for name in ("letter", "letter_ann"):
        rid = runs[name]
        assert canaries(dump(store, rid)) == []
        after = store.load_events("default", rid)
        assert [(e.seq, e.type, e.hash) for e in after] == [
            (e.seq, e.type, e.hash) for e in before[name]]
        assert store.load_checkpoint("default", rid) is None
        assert store.pending_signals("default", rid) == []
    # Not finished, or finished with no rule for its status: untouched.
    for name in ("doomed", "waiting"):
        assert store.load_events("default", runs[name]) == before[name]
    assert audit.verify(store).ok


def test_readers_see_the_skeleton_and_purged(store: MemoryStore) -> None:
    runs = make_runs(store)
    sweep_at(store)
    client = uw.Client(store)
    rid = runs["letter"]
    state = client.state(rid)
    assert (state.status, state.flow, state.purged, state.result, state.state) == (
        "completed", "letter", True, None, None)
    assert (state.model_calls, state.tokens_in, state.tool_calls) == (1, 40, 1)
    events = client.events(rid)
    assert all(isinstance(e.event, PayloadPurged) for e in events)
    kinds = [e.event.event_type for e in events]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunCompleted"
    assert "ToolSucceeded" in kinds and "ModelResponded" in kinds
    assert events[0].event.kept["flow"] == "letter" and events[0].at == THEN
    text = render(state, client.history(rid))
    assert "[purged]" in text and "ToolSucceeded" in text
    assert canaries(text.encode()) == []
    _, rec, after = client.state_at(rid, 3)
    assert after.purged and isinstance(rec.event, PayloadPurged)


def test_failed_runs_go_by_their_own_period_and_dead_runs_never(store: MemoryStore) -> None:
    runs = make_runs(store)
    broken = uw.Flow("broken", state=Notes)

    @broken.step
    async def crash(ctx: uw.RunContext[Notes, Any]) -> Any:
        raise RuntimeError(f"cannot mail {CANARIES[2]}")

    engine = uw.Engine(store, flows=[broken], clock=uw.ManualClock(THEN))
    dead, _ = engine.start("broken")
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert store.get_run("default", dead).status == "dead"  # type: ignore[union-attr]
    every = Retention(completed=DAY, failed=DAY, cancelled=DAY, blob_grace=0.0)
    [done] = sweep_at(store, every).tenants
    purged = {o.run_id for o in done.outcomes if o.action == "purged"}
    assert purged == {runs["letter"], runs["letter_ann"], runs["doomed"]}
    row = store.get_run("default", runs["doomed"])
    assert row is not None and row.status == "failed" and row.error is None
    assert canaries(dump(store, runs["doomed"])) == []
    assert canaries(dump(store, dead)) == [CANARIES[2]]


def test_a_legal_hold_on_a_run_or_its_subject_stops_the_purge(store: MemoryStore) -> None:
    runs = make_runs(store)
    store.put_hold(HoldRecord("default", "run", runs["letter"], "case 7", "legal", NOW))
    store.put_hold(HoldRecord("default", "subject", "ann", "request 9", "legal", NOW))
    [done] = sweep_at(store).tenants
    held = {o.run_id: o.reason for o in done.outcomes if o.action == "held"}
    assert held == {runs["letter"]: "legal hold on the run: case 7",
                    runs["letter_ann"]: "legal hold on subject ann: request 9"}
    assert done.count("purged") == 0
    assert canaries(dump(store, runs["letter"])) and canaries(dump(store, runs["letter_ann"]))
    store.release_hold("default", "subject", "ann", by="legal", at=NOW)
    [again] = sweep_at(store).tenants
    assert [o.run_id for o in again.outcomes if o.action == "purged"] == [runs["letter_ann"]]
    assert [o.action for o in again.outcomes if o.run_id == runs["letter"]] == ["held"]


def test_a_dry_run_changes_nothing(store: MemoryStore) -> None:
    runs = make_runs(store)
    before = {rid: dump(store, rid) for rid in runs.values()}
    blobs = dict(store._blobs)
    report = sweep_at(store, dry_run=True)
    assert report.dry_run and report.purged == 2
    assert {rid: dump(store, rid) for rid in runs.values()} == before
    assert store._blobs == blobs and store.list_sweeps() == [] and store.purged_runs(
        "default") == []


def test_an_edited_tombstone_fails_verification(store: MemoryStore) -> None:
    runs = make_runs(store)
    sweep_at(store)
    key = ("default", runs["letter"])
    events = store._events[key]
    victim = next(i for i, e in enumerate(events) if e.type == "ToolStarted")
    stone = read_tombstone(events[victim].payload)
    forged = dataclasses.replace(stone, kept={**stone.kept, "tool": "wire_money"})
    events[victim] = dataclasses.replace(events[victim], payload=forged.encode())
    report = audit.verify(store)
    [finding] = report.findings
    assert (finding.run_id, finding.seq) == (runs["letter"], events[victim].seq)
    assert "seal" in finding.reason
    events[victim] = dataclasses.replace(events[victim], payload=stone.encode(),
                                         type="ToolSucceeded")
    assert not audit.verify(store).ok
    events[victim] = StoredEvent(stone.seq, "ToolStarted", stone.encode(), stone.hash)
    assert audit.verify(store).ok


def test_a_tombstone_forged_with_its_seal_is_found_by_what_a_purge_leaves(
    store: MemoryStore,
) -> None:
    """A forger who writes a well-sealed tombstone in place of a payload (no chain hash to
    recompute) still leaves a run that no purge would: purged in part, not finished, or
    without the record of its purge."""
    runs = make_runs(store)
    sweep_at(store)
    key, live = ("default", runs["letter"]), ("default", runs["waiting"])
    # A live run's event turned into a tombstone of its own, correctly sealed.
    events = store._events[live]
    prev = store._events[live][0].hash
    forged = Tombstone.of(seq=2, type=events[1].type, at=THEN, kept={}, prev=prev,
                          payload=events[1].payload, hash=events[1].hash)
    events[1] = dataclasses.replace(events[1], payload=forged.encode())
    [finding] = audit.verify(store).findings
    assert finding.run_id == runs["waiting"] and "in part" in finding.reason
    store._events[live] = [
        dataclasses.replace(e, payload=Tombstone.of(
            seq=e.seq, type=e.type, at=THEN, kept={}, payload=e.payload, hash=e.hash,
            prev=events[i - 1].hash if i else genesis_hash("default", runs["waiting"]),
        ).encode()) for i, e in enumerate(events)]
    [finding] = audit.verify(store).findings
    assert "not finished" in finding.reason
    # A purged run whose purge record is gone.
    del store._purged[key]
    assert any("record of the run's purge" in f.reason for f in audit.verify(store).findings)


def test_heads_anchored_before_the_purge_still_verify(store: MemoryStore,
                                                      tmp_path: Path) -> None:
    make_runs(store)
    pem, public = generate_keypair()
    write_private_key(tmp_path / "anchor.pem", pem)
    log = audit.FileAnchorLog(tmp_path / "anchors.jsonl")
    audit.anchor(store, load_private_key(tmp_path / "anchor.pem"), log)
    sweep_at(store)
    anchors = audit.read_anchors(log.lines(), audit.load_public_key(public))
    report = audit.verify(store, anchors=anchors)
    assert report.ok and report.anchors == 1


def test_usage_and_activity_add_up_after_a_purge(store: MemoryStore) -> None:
    make_runs(store)
    client = uw.Client(store)
    usage = tenant_usage(store, "default", since=THEN - DAY)
    figures = client.activity(since=THEN - DAY, days=3)
    sweep_at(store)
    assert tenant_usage(store, "default", since=THEN - DAY) == usage
    after = client.activity(since=THEN - DAY, days=3)
    assert [(d.model_calls, d.tokens_in, d.cost_usd) for d in after.days] == [
        (d.model_calls, d.tokens_in, d.cost_usd) for d in figures.days]
    assert usage.model_calls == 2 and usage.tool_calls == 3


def test_blobs_only_purged_runs_held_are_collected(store: MemoryStore) -> None:
    runs = make_runs(store)
    for key in store._written:  # as if they were written long ago
        store._written[key] -= 3 * DAY
    total = len(store._blobs)
    report = sweep_at(store)
    [done] = report.tenants
    assert done.blobs_deleted is not None and done.blobs_deleted > 0
    assert len(store._blobs) == total - done.blobs_deleted
    everything = b"".join(store._blobs.values())
    # What is left is the live run's and the failed run's (no rule purges failed runs).
    assert audit.verify(store).ok
    client = uw.Client(store)
    assert client.state(runs["waiting"]).status == "waiting"
    assert client.history(runs["doomed"])
    assert CANARIES[0].encode() in everything


def test_the_sweep_is_logged_and_a_second_one_finds_nothing(store: MemoryStore) -> None:
    runs = make_runs(store)
    first = sweep_at(store, by="cron")
    [entry] = store.list_sweeps("default")
    assert (entry.sweep_id, entry.by, entry.purged, entry.held, entry.skipped) == (
        first.sweep_id, "cron", 2, 0, 0)
    assert entry.finished_at == NOW and entry.blobs_deleted is not None
    assert sorted(p.run_id for p in store.purged_runs("default")) == sorted(
        [runs["letter"], runs["letter_ann"]])
    assert {p.rule for p in store.purged_runs("default")} == {"retention.completed = 5d"}
    second = sweep_at(store)
    [done] = second.tenants
    assert done.outcomes == [] and done.blobs_deleted is None


def test_a_run_whose_journal_fails_verification_is_not_purged(store: MemoryStore) -> None:
    runs = make_runs(store)
    key = ("default", runs["letter"])
    first = store._events[key][0]
    store._events[key][0] = dataclasses.replace(first, payload=first.payload.replace(
        b"letter", b"lettre"))
    [done] = sweep_at(store).tenants
    [skipped] = [o for o in done.outcomes if o.action == "skipped"]
    assert skipped.run_id == runs["letter"] and "fails verification" in skipped.reason
    assert canaries(dump(store, runs["letter"]))


def test_a_sweep_over_regions_keeps_each_tenant_in_its_region() -> None:
    india, europe = MemoryStore(), MemoryStore()
    for s in (india, europe):
        s.migrate()
    store = RegionalStore({"in": india, "eu": europe}, tenants={"acme": "in", "globex": "eu"})
    acme, globex = make_runs(store, tenant="acme"), make_runs(store, tenant="globex")
    store.put_hold(HoldRecord("globex", "subject", "ann", "case 3", "legal", NOW))
    report = sweep(store, RULES, clock=uw.ManualClock(NOW))
    assert {t.tenant_id: t.count("purged") for t in report.tenants} == {"acme": 2, "globex": 1}
    assert [h.tenant_id for h in store.list_holds()] == ["globex"] and india.list_holds() == []
    assert {p.run_id for p in india.purged_runs("acme")} == {acme["letter"], acme["letter_ann"]}
    assert [p.run_id for p in europe.purged_runs("globex")] == [globex["letter"]]
    assert europe.purged_runs("acme") == [] and india.list_sweeps("globex") == []
    assert {s.tenant_id for s in store.list_sweeps()} == {"acme", "globex"}
    assert audit.verify(store).ok
