"""Reads within :func:`~underway.store._reading.committed_reads` (the API's reads; on SQLite
they use read-only connections) see at once every write that has returned, on every
store."""

from __future__ import annotations

from builders import create, fake_hash, signal

from underway.store import Store
from underway.store._reading import committed_reads


def test_committed_reads_see_each_write_once_it_returned(store: Store) -> None:
    for n in range(20):
        run_id, blob = f"r{n}", fake_hash(f"blob{n}")
        create(store, run_id, blobs={blob: f"value {n}".encode()})
        with committed_reads():
            row = store.get_run("t1", run_id)
            assert row is not None and row.status == "ready"
            assert store.get_blobs("t1", [blob]) == {blob: f"value {n}".encode()}
        assert store.send_signal(signal("go", f"s{n}", run_id=run_id))
        with committed_reads():
            assert [s.signal_id for s in store.pending_signals("t1", run_id)] == [f"s{n}"]
