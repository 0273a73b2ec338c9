"""Property tests: encoding round-trips, patches, and fold(events) == checkpoint + tail."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import underway as uw
from fakes.keys import encrypted
from underway import events as ev
from underway.codec import Codec, Where
from underway.journal import Journal
from underway.journal.patch import apply_patch, make_patch
from underway.journal.state import RunState, apply
from underway.store.memory import MemoryStore
from underway.testing import memory_engine

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)
big_text = st.text(min_size=0, max_size=3000)


@given(json_values, json_values)
def test_patch_turns_old_into_new(old: Any, new: Any) -> None:
    patch = make_patch(old, new)
    assert apply_patch(_copy(old), patch) == new


HERE = Where("test", "t", ("r",))
SEALED = MemoryStore()
encrypted(SEALED)


def _codec(threshold: int, sealed: bool) -> Codec:
    return Codec(threshold=threshold, sealer=SEALED.codec.sealer if sealed else None)


@given(st.lists(json_values | big_text, max_size=30), st.integers(1, 4096), st.booleans())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_codec_round_trips_through_blobs(value: list[Any], threshold: int, sealed: bool) -> None:
    codec = _codec(threshold, sealed)
    blobs: dict[str, bytes] = {}
    stored = codec.encode(value, blobs, HERE)
    fresh = _codec(threshold, sealed)  # no cache: everything comes from the blobs
    assert fresh.decode(
        stored, lambda keys: {k: blobs[k] for k in keys if k in blobs}, HERE) == value


@given(st.dictionaries(st.sampled_from(["$blob", "$chain", "$lit", "n", "x"]),
                       json_values), st.booleans())
def test_user_dicts_that_look_like_references_survive(value: dict[str, Any],
                                                      sealed: bool) -> None:
    codec = _codec(16, sealed)
    blobs: dict[str, bytes] = {}
    stored = codec.encode(value, blobs, HERE)
    assert _codec(16, sealed).decode(stored, lambda ks: {k: blobs[k] for k in ks},
                                     HERE) == value


event_strategy = st.one_of(
    st.builds(ev.StepStarted, step=st.text(min_size=1, max_size=10), attempt=st.integers(1, 5)),
    st.builds(ev.ToolSucceeded, key=st.text(max_size=20), tool=st.text(max_size=10),
              index=st.integers(0, 50), args_hash=st.text(max_size=64), result=json_values),
    st.builds(ev.ModelResponded, key=st.text(max_size=20), index=st.integers(0, 9),
              model=st.text(max_size=10), request=json_values, response=json_values | big_text,
              tokens_in=st.integers(0, 10**6), tokens_out=st.integers(0, 10**6),
              cost_usd=st.floats(0, 100), latency_ms=st.floats(0, 1e5)),
    st.builds(ev.SignalReceived, signal=st.text(max_size=10), signal_id=st.text(max_size=10),
              payload=json_values),
    st.builds(ev.RunFailed, reason=st.text(max_size=50)),
)


@given(st.lists(event_strategy, min_size=1, max_size=15), st.booleans())
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=60)
def test_events_round_trip_through_the_journal(events: list[ev.Event], sealed: bool) -> None:
    store = MemoryStore()
    journal = Journal(store, _codec(64, sealed))
    blobs: dict[str, bytes] = {}
    pending = [(i + 1, 1.5 * i, e) for i, e in enumerate(events)]
    stored = journal.encode("t", "r", pending, ev.genesis_hash("t", "r"), blobs)
    store._blobs.update({("t", k): v for k, v in blobs.items()})
    decoded = Journal(store, _codec(64, sealed)).decode("t", "r", stored)
    assert [d.event for d in decoded] == events
    assert [d.seq for d in decoded] == [p[0] for p in pending]


class Doc(BaseModel):
    items: list[Any] = []
    counter: int = 0
    notes: dict[str, Any] = {}


actions = st.lists(
    st.one_of(
        st.tuples(st.just("append"), json_values),
        st.tuples(st.just("note"), st.text(max_size=5), json_values),
        st.tuples(st.just("tool"), json_values),
        st.tuples(st.just("value"), st.sampled_from(["now", "uuid", "random"])),
        st.tuples(st.just("sleep"), st.integers(1, 100)),
        st.tuples(st.just("wait"), st.booleans()),
    ),
    min_size=1,
    max_size=25,
)


@given(actions, st.integers(1, 10))
@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=40, deadline=None)
def test_fold_equals_checkpoint_plus_tail_for_random_histories(
    script: list[tuple[Any, ...]], checkpoint_every: int
) -> None:
    @uw.tool
    async def echo(args: Any) -> Any:
        return args

    flow = uw.Flow("random", state=Doc)

    @flow.step
    async def play(ctx: Any) -> Any:
        i = ctx.state.counter
        if i >= len(script):
            return ctx.done(ctx.state.counter)
        ctx.state.counter += 1
        action = script[i]
        match action[0]:
            case "append":
                ctx.state.items.append(action[1])
            case "note":
                ctx.state.notes[action[1]] = action[2]
            case "tool":
                ctx.state.items.append(await ctx.call(echo, {"v": action[1]}))
            case "value":
                getattr(ctx, action[1])()
            case "sleep":
                return ctx.sleep(action[1], then=play)
            case "wait":
                return ctx.wait("go", timeout=None if action[1] else 5, then=play)
        return ctx.goto(play)

    engine, clock = memory_engine([flow])
    engine.checkpoint_every = checkpoint_every
    run_id, _ = engine.start(flow)
    runner = uw.Runner(engine)
    for _ in range(len(script) + 2):
        asyncio.run(runner.run_until_idle())
        s = engine.state(run_id)
        if s.final:
            break
        if s.waiting_signal:
            engine.signal(run_id, "go", {"seq": s.seq})
        clock.advance(200)
    history = engine.journal.history("default", run_id)
    full = RunState(tenant_id="default", run_id=run_id)
    for rec in history:
        apply(full, rec)
    assert full.status == "completed"
    for cut in range(len(history) + 1):
        head = RunState(tenant_id="default", run_id=run_id)
        for rec in history[:cut]:
            apply(head, rec)
        restored = RunState.from_json(json.loads(ev.canonical_json(head.to_json())))
        for rec in history[cut:]:
            apply(restored, rec)
        assert restored.to_json() == full.to_json()
    assert engine.journal.load("default", run_id).to_json() == full.to_json()


def _copy(value: Any) -> Any:
    import copy

    return copy.deepcopy(value)
