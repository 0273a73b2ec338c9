"""SQLite and chunked values: while a value's chunks are written, the store's connection
does not checkpoint the log on commit (a run's commit would then wait while chunk pages are
copied into the database file); a connection of the chunks' own checkpoints it, so the log
does not grow with the value; afterwards the store's connection checkpoints as before."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from underway.store import connect
from underway.store.sqlite._journal import CHECKPOINT_BYTES

CHUNK = 64 * 1024


def test_chunks_are_checkpointed_off_the_stores_connection(sqlite_url: str) -> None:
    store: Any = connect(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")

    def autocheckpoint() -> int:
        with store.connection() as c:
            return int(c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    before = autocheckpoint()
    assert before > 0
    seen: list[int] = []
    count = 3 * CHECKPOINT_BYTES // CHUNK

    def chunks() -> Iterator[bytes]:
        for i in range(count):
            seen.append(autocheckpoint())
            yield b"x" * CHUNK if i else b'"' + b"x" * (CHUNK - 1)

    store.write_blob_chunks("default", "e" * 64, chunks())
    assert set(seen) == {0}, "the store's connection does not checkpoint meanwhile"
    assert autocheckpoint() == before, "and does again afterwards"
    # Checkpointed as it went: the log never held the three times CHECKPOINT_BYTES written.
    assert os.path.getsize(path + "-wal") < 2 * CHECKPOINT_BYTES
    with store.connection() as c:
        assert c.execute("SELECT count(*) FROM blob_chunks").fetchone()[0] == count
    store.close()
