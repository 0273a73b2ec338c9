"""Retention on an encrypted store: a sweep opens what it purges (a skeleton needs the
events' fields), its tombstones verify without keys, and its blob collection follows the
references inside sealed events, checkpoints and blobs, so a live run keeps every blob it
needs; without the keys the sweep purges nothing and collects nothing."""

from __future__ import annotations

import underway as uw
from fakes.keys import encrypted
from fakes.retention_world import DAY, THEN, make_runs
from underway.codec import Codec
from underway.crypto import refuse_plaintext
from underway.events import PayloadPurged
from underway.ops import audit
from underway.privacy.retention import Retention, sweep
from underway.store import MemoryStore

NOW = THEN + 10 * DAY
RULES = Retention(completed=5 * DAY, blob_grace=0.0)


def sealed_store() -> MemoryStore:
    store = MemoryStore()
    store.migrate()
    encrypted(store, b"r" * 32)
    return store


def test_a_sweep_purges_sealed_runs_and_collects_only_unreferenced_blobs() -> None:
    store = sealed_store()
    runs = make_runs(store)
    for key in store._written:  # as if written long ago
        store._written[key] -= 3 * DAY
    total = len(store._blobs)
    report = sweep(store, RULES, clock=uw.ManualClock(NOW))
    [done] = report.tenants
    purged = sorted(o.run_id for o in done.outcomes if o.action == "purged")
    assert purged == sorted([runs["letter"], runs["letter_ann"]])
    assert done.blobs_deleted is not None and 0 < done.blobs_deleted < total
    # The skeleton was read out of the sealed events; the live runs still open whole.
    client = uw.Client(store)
    skeleton = client.events(runs["letter"])
    assert skeleton and all(isinstance(e.event, PayloadPurged) for e in skeleton)
    assert client.state(runs["waiting"]).status == "waiting"
    assert client.history(runs["doomed"])
    assert audit.verify(store).ok
    # Without keys the chain, tombstones included, still verifies.
    store.codec = Codec()
    assert audit.verify(store).ok


def test_without_keys_a_sweep_purges_and_collects_nothing() -> None:
    store = sealed_store()
    runs = make_runs(store)
    for key in store._written:
        store._written[key] -= 3 * DAY
    total = len(store._blobs)
    store.codec = Codec()
    assert refuse_plaintext(store, "no keys in this test")
    report = sweep(store, RULES, clock=uw.ManualClock(NOW))
    [done] = report.tenants
    assert [o.action for o in done.outcomes if o.run_id == runs["letter"]] != ["purged"]
    assert not any(o.action == "purged" for o in done.outcomes)
    assert len(store._blobs) == total
