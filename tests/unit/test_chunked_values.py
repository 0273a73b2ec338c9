"""Large strings in chunks, on the in-memory store: the chunks join to the value's
canonical JSON whatever falls on their edges, a run round-trips a value of many chunks, a
value too large for the limit fails the run's commit (dead letter) and a tool result over
it fails its call."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway import _chunked as chunked
from underway.codec import Codec, blob_where
from underway.errors import ValueTooLarge
from underway.events import canonical_json
from underway.journal import Journal
from underway.store import MemoryStore

TRICKY = ['', 'a', 'x' * 10, 'ab"c\\d\ne\x01é€😀\x7f\u2028' * 5, 'é' * 7, '\\' * 9]


@pytest.mark.parametrize("value", TRICKY)
@pytest.mark.parametrize("chars", [1, 2, 3, 7, 100])
def test_the_chunks_join_to_the_canonical_json(value: str, chars: int) -> None:
    assert b"".join(chunked.pieces(value, chars)) == canonical_json(value)


@pytest.mark.parametrize("value", [*TRICKY, "plain text" * 3 + '"' + "more plain" * 3])
@pytest.mark.parametrize("chars", [1, 4, 7, 100])
@pytest.mark.parametrize("slice_chars", [1, 3, 64])
def test_a_scan_by_slices_hashes_the_canonical_json_and_finds_the_escaped_chunks(
        value: str, chars: int, slice_chars: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunked, "SLICE", slice_chars)
    digest = hashlib.sha256()
    size, escaped = chunked.scan(value, chars, 1 << 20, digest, "a value")
    whole = canonical_json(value)
    assert (size, digest.hexdigest()) == (len(whole), hashlib.sha256(whole).hexdigest())
    plain = list(chunked.pieces(value, chars))
    assert escaped == {i for i, p in enumerate(plain)
                       if canonical_json(value[i * chars:(i + 1) * chars])[1:-1]
                       != value[i * chars:(i + 1) * chars].encode()}
    # The chunks made knowing which are escaped are the ones made checking each.
    assert list(chunked.pieces(value, chars, escaped)) == plain
    with pytest.raises(ValueTooLarge):
        chunked.scan(value, chars, len(whole) - 1, hashlib.sha256(), "a value")


@pytest.mark.parametrize("value", TRICKY[3:])
def test_a_chunked_blob_has_the_address_of_the_whole_value(value: str) -> None:
    codec = Codec(chunk_bytes=4)
    blob = codec.large_blob(value, blob_where("t", ""))
    whole = Codec(threshold=1).externalize(value, {}, blob_where("t", ""))
    assert whole == {"$blob": blob.key}
    stored = list(blob.chunks())
    assert chunked.read_str(blob.key, bytes(blob), lambda i: stored[i],
                            lambda raw, i, n: raw) == value


class Doc(BaseModel):
    text: str = ""
    failed: str = ""


def run_with(value: str, store: MemoryStore, *, in_state: bool = True) -> str:
    @uw.tool(mutating=False)
    def fetch(args: dict[str, Any]) -> Any:
        return value

    flow = uw.Flow("big", state=Doc)

    @flow.step(start=True)
    async def go(ctx: uw.RunContext[Doc, Any]) -> Any:
        try:
            text = await ctx.call(fetch, {})
        except uw.ToolCallError as exc:
            ctx.state.failed = str(exc)
            return ctx.done(0)
        if in_state:
            ctx.state.text = text
        return ctx.done(len(text))

    run_id, _ = uw.Client(store).start("big", {})
    asyncio.run(uw.Runner(uw.Engine(store, flows=[flow])).run_until_idle())
    return run_id


def test_a_value_of_many_chunks_round_trips_on_the_memory_store() -> None:
    store = MemoryStore()
    store.codec.chunk_bytes = 16
    value = TRICKY[3] * 20
    run_id = run_with(value, store)
    assert len(store._chunks) == 1
    state = Journal(store).load("default", run_id)
    assert isinstance(state.state, dict) and state.state["text"] == value


def test_a_result_over_the_limit_fails_its_call() -> None:
    store = MemoryStore()
    store.codec.chunk_bytes = 16
    store.codec.max_value_bytes = 2000
    run_id = run_with("y" * 3000, store)
    state = Journal(store).load("default", run_id)
    assert isinstance(state.state, dict)
    assert "ValueTooLarge" in state.state["failed"] and "2,000 bytes" in state.state["failed"]
    assert store._chunks == {}


def test_a_large_value_not_from_a_tool_over_the_limit_is_refused_by_the_codec() -> None:
    codec = Codec(chunk_bytes=16, max_value_bytes=2000)
    with pytest.raises(ValueTooLarge, match="over the limit of 2,000 bytes"):
        codec.encode({"text": "z" * 5000}, {}, blob_where("t", ""))
    with pytest.raises(ValueTooLarge, match="over the limit of 2,000 bytes"):
        codec.encode({"many": {str(i): "w" * 50 for i in range(100)}}, {},
                     blob_where("t", ""))


def test_the_work_on_a_chunked_value_rests_between_chunks_off_the_event_loop_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rests: list[float] = []
    monkeypatch.setattr(chunked.time, "sleep", rests.append)
    value = "abc" * 10
    blob = Codec(chunk_bytes=4).large_blob(value, blob_where("t", ""))
    assert len(rests) == 7, "a rest between each two chunks hashed"
    rests.clear()
    assert len(list(blob.chunks())) == blob.n == 8
    assert len(rests) == 7, "a rest between each two chunks written"
    assert all(0 <= r <= chunked.MAX_REST for r in rests)
    stored = list(blob.chunks())
    rests.clear()
    chunked.read_str(blob.key, bytes(blob), lambda i: stored[i], lambda raw, i, n: raw)
    assert len(rests) == 7, "and between each two chunks read"

    async def on_the_loop() -> None:
        rests.clear()
        list(blob.chunks())
        chunked.read_str(blob.key, bytes(blob), lambda i: stored[i], lambda raw, i, n: raw)
        assert rests == [], "a thread running an event loop never rests"

    asyncio.run(on_the_loop())
