"""A large value of a data subject's run, with encryption at rest, on SQLite and
PostgreSQL: each chunk is its own sealed box under the subject's key (none of the text is
stored in the clear), the run reads back whole, a chunk moved to another place does not
open, a rotation of the tenant's key leaves the chunks readable, and once the subject is
erased no chunk opens."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.crypto import Envelope, KeyringFile, encrypt, reseal
from underway.errors import IntegrityError, KeyUnavailable
from underway.journal import Journal
from underway.journal.blobs import BlobReader
from underway.privacy.erasure import erase_subject
from underway.store import Store, connect

CHUNK = 1024
CANARY = "CANARY-4242-"
SUBJECT = "cust-9"


class Doc(BaseModel):
    text: str = ""


def flow(value: str) -> uw.Flow[Doc, Any]:
    @uw.tool(mutating=False)
    def fetch(args: dict[str, Any]) -> Any:
        return value

    f = uw.Flow("big", state=Doc)

    @f.step(start=True)
    async def go(ctx: uw.RunContext[Doc, Any]) -> Any:
        ctx.state.text = await ctx.call(fetch, {})
        return ctx.done(len(ctx.state.text))

    return f


class Swapped(BlobReader):
    """Reads chunk 1 in place of chunk 0 and chunk 0 in place of chunk 1."""

    def chunk(self, key: str) -> Callable[[int], bytes | None]:
        inner = super().chunk(key)
        return lambda i: inner({0: 1, 1: 0}.get(i, i))


class Planted(BlobReader):
    """Reads plain text in place of one sealed chunk (an attacker with write access to
    the database, who has no key)."""

    def __init__(self, store: Store, tenant_id: str, index: int) -> None:
        super().__init__(store, tenant_id)
        self.index = index

    def chunk(self, key: str) -> Callable[[int], bytes | None]:
        inner = super().chunk(key)
        forged = b'"FORGED' if self.index == 0 else b"FORGED"
        return lambda i: forged if i == self.index else inner(i)


def rows(store: Store, sql: str, *params: Any) -> list[Any]:
    db: Any = store
    if hasattr(db, "_pool"):
        with db._pool.connection() as conn:
            return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
    return list(db._conn.execute(sql, params).fetchall())


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_chunks_are_sealed_under_the_subjects_key_and_erased_with_it(
        db: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    store = connect(str(request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")))
    encrypt(store, KeyringFile.create(tmp_path / "underway.keyring"))
    store.codec.chunk_bytes = CHUNK
    value = (CANARY * (CHUNK * 6 // len(CANARY) + 1))[:CHUNK * 6 + 3]
    run_id, _ = uw.Client(store).start("big", {}, subject=SUBJECT)
    asyncio.run(uw.Runner(uw.Engine(store, flows=[flow(value)])).run_until_idle())

    chunks = rows(store, "SELECT key, idx, data FROM blob_chunks ORDER BY idx")
    assert [r[1] for r in chunks] == list(range(7))
    assert all(bytes(r[2])[:1] == b"\x01" for r in chunks), "every chunk is a sealed box"
    assert not any(CANARY.encode() in bytes(r[2]) for r in chunks)
    state = Journal(store).load("default", run_id)
    assert isinstance(state.state, dict) and state.state["text"] == value

    key = chunks[0][0]
    [(manifest,)] = rows(store, "SELECT data FROM blobs WHERE key = ?", key)
    assert store.codec.read_large(key, bytes(manifest), BlobReader(store, "default"),
                                  "default") == value
    with pytest.raises(IntegrityError):
        store.codec.read_large(key, bytes(manifest), Swapped(store, "default"), "default")
    for planted in (0, 3):  # a plain chunk among sealed ones opens nothing
        with pytest.raises(IntegrityError, match=f"chunk {max(planted, 1)} of 7"):
            store.codec.read_large(key, bytes(manifest), Planted(store, "default", planted),
                                   "default")

    # A rotation of the tenant's key reseals the blobs it can; a chunked one is left
    # under the key that sealed it, and still reads.
    envelope = store.codec.sealer
    assert isinstance(envelope, Envelope)
    envelope.keys.rotate("default")
    reseal(store, "default", "blob", limit=1000)
    assert Journal(store).history("default", run_id)

    erase_subject(store, SUBJECT, by="dpo", reason="request 9")
    with pytest.raises(KeyUnavailable):
        store.codec.read_large(key, bytes(manifest), BlobReader(store, "default"), "default")
    store.close()
