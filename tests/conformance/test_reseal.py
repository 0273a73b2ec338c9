"""The sealed rows a key rotation seals again, on every backend: blobs, unconsumed signals
and schedules' input (never checkpoints, which the journal commits to), read in batches in
position order and replaced only where nobody changed them meanwhile."""

from __future__ import annotations

from builders import create

from underway.store import Store
from underway.store.base import ScheduleRecord, SealedRow, SignalRecord
from underway.store.records import SEALED_KINDS


def _fill(store: Store) -> None:
    create(store, "r1", tenant="acme", blobs={"b" * 64: b"blob-b", "a" * 64: b"blob-a"})
    create(store, "r9", tenant="globex", blobs={"c" * 64: b"other tenant"})
    for sid in ("s2", "s1"):
        store.send_signal(SignalRecord("acme", "r1", sid, "reply", b"payload-" + sid.encode(),
                                       None, 1.0))
    store.put_schedule(ScheduleRecord("acme", "nightly", "f", "0 2 * * *", "UTC", b"input",
                                      "default", 10.0, True, 1.0))


def test_sealed_rows_come_in_batches_in_position_order(store: Store) -> None:
    _fill(store)
    first = store.sealed_rows("acme", "blob", after=(), limit=1)
    assert [(r.position, r.data) for r in first] == [(("a" * 64,), b"blob-a")]
    rest = store.sealed_rows("acme", "blob", after=first[-1].position, limit=10)
    assert [(r.position, r.data) for r in rest] == [(("b" * 64,), b"blob-b")]
    signals = store.sealed_rows("acme", "signal", after=(), limit=10)
    assert [(r.position, r.name, r.data) for r in signals] == [
        (("r1", "s1"), "reply", b"payload-s1"), (("r1", "s2"), "reply", b"payload-s2")]
    assert store.sealed_rows("acme", "signal", after=("r1", "s1"), limit=10)[0].position == \
        ("r1", "s2")
    assert [r.data for r in store.sealed_rows("acme", "schedule", after=(), limit=5)] == \
        [b"input"]
    assert set(SEALED_KINDS) == {"blob", "signal", "schedule"}


def test_replacing_sealed_rows_skips_rows_changed_meanwhile(store: Store) -> None:
    _fill(store)
    blobs = store.sealed_rows("acme", "blob", after=(), limit=10)
    signals = store.sealed_rows("acme", "signal", after=(), limit=10)
    schedule = store.sealed_rows("acme", "schedule", after=(), limit=10)[0]
    stale = SealedRow("signal", "acme", ("r1", "s1"), b"not what is stored", name="reply")
    done = store.replace_sealed([(blobs[0], b"new-a"), (signals[1], b"new-s2"),
                                 (schedule, b"new-input"), (stale, b"lost")])
    assert done == 3
    assert store.get_blobs("acme", ["a" * 64, "b" * 64]) == {"a" * 64: b"new-a",
                                                            "b" * 64: b"blob-b"}
    assert {s.signal_id: s.payload for s in store.pending_signals("acme", "r1")} == {
        "s1": b"payload-s1", "s2": b"new-s2"}
    assert store.get_schedule("acme", "nightly").input == b"new-input"  # type: ignore[union-attr]
    assert store.get_blobs("globex", ["c" * 64]) == {"c" * 64: b"other tenant"}
