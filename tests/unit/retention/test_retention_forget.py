"""Forgetting purged runs on the in-memory store: once ``forget_after`` is over, a purged
run's skeleton is gone and the forget log names its head; the audit (with anchors) tells
it from a lost run, and finds an edited forget log; holds, unpurged runs and runs with a
live relative are kept; a dry run changes nothing; the sweep log counts the forgotten."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import underway as uw
from fakes.retention_world import DAY, FLOWS, THEN, TOOLS, Notes, Person, make_runs
from underway.guard.approvals import generate_keypair, load_private_key, write_private_key
from underway.ops import audit
from underway.privacy.retention import Periods, Retention, sweep
from underway.store import MemoryStore
from underway.store.base import HoldRecord

RULES = Retention(completed=5 * DAY, forget_after=30 * DAY, blob_grace=0.0)
PURGE_AT = THEN + 10 * DAY
FORGET_AT = THEN + 40 * DAY


@pytest.fixture
def store() -> MemoryStore:
    s = MemoryStore()
    s.migrate()
    return s


def sweep_at(store: MemoryStore, at: float, rules: Retention = RULES, **kw: Any) -> Any:
    return sweep(store, rules, clock=uw.ManualClock(at), **kw)


def anchored(store: MemoryStore, tmp_path: Path) -> tuple[audit.FileAnchorLog, str]:
    """Anchor every head now; the log and its public key."""
    pem, public = generate_keypair()
    write_private_key(tmp_path / "anchor.pem", pem)
    log = audit.FileAnchorLog(tmp_path / "anchors.jsonl")
    audit.anchor(store, load_private_key(tmp_path / "anchor.pem"), log)
    return log, public


def test_a_purged_run_is_forgotten_once_its_period_is_over(store: MemoryStore) -> None:
    runs = make_runs(store)
    letters = sorted([runs["letter"], runs["letter_ann"]])
    heads = {r: store.get_run("default", r) for r in letters}
    # Purged, but not yet past forget_after: the skeleton stays.
    [first] = sweep_at(store, PURGE_AT).tenants
    assert first.count("purged") == 2 and first.forgets == []
    [second] = sweep_at(store, FORGET_AT).tenants
    assert sorted(o.run_id for o in second.forgets if o.action == "forgotten") == letters
    for r in letters:
        assert store.get_run("default", r) is None
        assert store.load_events("default", r) == []
    lines = store.forgotten_runs("default")
    assert sorted(f.run_id for f in lines) == letters
    for f in lines:
        row = heads[f.run_id]
        assert row is not None and (f.last_seq, f.head) == (row.last_seq, row.last_hash)
    # Untouched: the failed run (no purge rule) and the live one.
    for name in ("doomed", "waiting"):
        assert store.get_run("default", runs[name]) is not None
    logged = store.list_sweeps("default", limit=1)[0]
    assert logged.forgotten == 2
    assert audit.verify(store).ok
    assert sweep_at(store, FORGET_AT + DAY).tenants[0].forgets == []


def test_the_audit_tells_a_forgotten_run_from_a_lost_one(store: MemoryStore,
                                                         tmp_path: Path) -> None:
    runs = make_runs(store)
    log, public = anchored(store, tmp_path)
    sweep_at(store, PURGE_AT)
    sweep_at(store, FORGET_AT)
    anchors = audit.read_anchors(log.lines(), audit.load_public_key(public))
    report = audit.verify(store, anchors=anchors)
    assert report.ok, report.findings
    assert report.forgotten == 2
    # A run deleted without the forget log: lost, as before.
    lost = ("default", runs["doomed"])
    del store._runs[lost], store._events[lost]
    report = audit.verify(store, anchors=anchors)
    assert [(f.run_id, "the run is gone" in f.reason) for f in report.findings] == [
        (runs["doomed"], True)]


def test_an_edited_forget_log_or_a_head_it_does_not_name_is_found(
    store: MemoryStore, tmp_path: Path,
) -> None:
    runs = make_runs(store)
    log, public = anchored(store, tmp_path)
    sweep_at(store, PURGE_AT)
    sweep_at(store, FORGET_AT)
    lines = store._forgotten["default"]
    victim = lines[0].run_id
    lines[0] = dataclasses.replace(lines[0], head="0" * 64)
    anchors = audit.read_anchors(log.lines(), audit.load_public_key(public))
    findings = audit.verify(store, anchors=anchors).findings
    assert any(f.run_id == victim and "forget log does not follow" in f.reason
               for f in findings)
    assert any(f.run_id == victim and "anchored another head" in f.reason
               for f in findings)
    # Without anchors, the chain alone still shows the edit.
    assert not audit.verify(store).ok
    assert victim in (runs["letter"], runs["letter_ann"])


def test_a_dry_run_shows_the_forgets_and_changes_nothing(store: MemoryStore) -> None:
    make_runs(store)
    sweep_at(store, PURGE_AT)
    before = dict(store._runs)
    [dry] = sweep_at(store, FORGET_AT, dry_run=True).tenants
    assert [o.action for o in dry.forgets] == ["forgotten", "forgotten"]
    assert store._runs == before and store.forgotten_runs("default") == []


def test_held_and_unpurged_runs_are_kept(store: MemoryStore) -> None:
    runs = make_runs(store)
    store.put_hold(HoldRecord("default", "run", runs["letter"], "case 7", "legal", THEN))
    sweep_at(store, PURGE_AT)  # the held letter is not purged
    rules = dataclasses.replace(RULES, failed=DAY)
    [t] = sweep_at(store, FORGET_AT, rules).tenants
    # The failed run is purged in this sweep and, past forget_after already, forgotten.
    assert {o.run_id: o.action for o in t.forgets} == {
        runs["letter_ann"]: "forgotten", runs["doomed"]: "forgotten"}
    assert store.get_run("default", runs["letter"]) is not None
    store.release_hold("default", "run", runs["letter"], by="legal", at=THEN)
    sweep_at(store, FORGET_AT + DAY)
    assert store.get_run("default", runs["letter"]) is None


def test_forget_after_per_flow_and_never() -> None:
    rules = Retention(completed=DAY, forget_after=10 * DAY,
                      flows={"kyc": Periods(forget_after=float("inf"))},
                      tenants={"acme": Retention(forget_after=2 * DAY)})
    rule = rules.forget_rule("default", "letter")
    assert rule is not None and rule.describe() == "retention.forget_after = 10d"
    assert rules.forget_rule("default", "kyc") is None
    acme = rules.forget_rule("acme", "letter")
    assert acme is not None and acme.source == "retention.tenants.acme.forget_after"
    assert rules.forgets and not Retention(completed=DAY).forgets


parent: uw.Flow[Notes, Person] = uw.Flow("parent", state=Notes, input=Person)


@parent.step
async def launch(ctx: uw.RunContext[Notes, Person]) -> Any:
    await ctx.start("waiting", {"who": "kid"}, detached=True)
    return ctx.done({})


def test_a_run_with_a_live_relative_is_kept(store: MemoryStore) -> None:
    clock = uw.ManualClock(THEN)
    engine = uw.Engine(store, flows=[*FLOWS, parent], tools=TOOLS, clock=clock)
    run = engine.start("parent", {"who": "x"})[0]
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert store.get_run("default", run).status == "completed"  # type: ignore[union-attr]
    sweep_at(store, PURGE_AT)
    [t] = sweep_at(store, FORGET_AT).tenants
    [kept] = [o for o in t.forgets if o.run_id == run]
    assert kept.action == "skipped" and "not finished" in kept.reason
    assert store.get_run("default", run) is not None
    [child] = [r for r in store._runs.values() if r.flow == "waiting"]
    engine.cancel(child.run_id, by="test")
    asyncio.run(uw.Runner(engine).run_until_idle())
    sweep_at(store, FORGET_AT + DAY)
    assert store.get_run("default", run) is None
