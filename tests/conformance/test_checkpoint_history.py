"""The state after any event of a long run is read from the nearest kept checkpoint before
it plus the events since, and equals the fold from the first event, on every backend. A
checkpoint a newer one replaced is kept, checked against the journal when read (a forged
one is refused and the state folded from the start), and dropped with the run's
checkpoint."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from store_backends import Backend

import underway as uw
from underway.journal._journal import states_around
from underway.journal.state import RunState
from underway.store import Store
from underway.testing import ManualClock

STEPS = 40
"""Three events a step (start, value, completion): about 120 events, a checkpoint every
10 of them."""


class Count(BaseModel):
    n: int = 0
    seen: list[int] = []


flow: uw.Flow[Count, Any] = uw.Flow("counting", state=Count)


@flow.step(start=True)
async def tick(ctx: uw.RunContext[Count, Any]) -> Any:
    ctx.state.n += 1
    ctx.state.seen.append(int(ctx.random() * 1000))
    return ctx.goto(tick) if ctx.state.n < STEPS else ctx.done(ctx.state.n)


@pytest.fixture
def run(backend: Backend) -> tuple[Store, uw.Engine, str]:
    store = backend.open()
    engine = uw.Engine(store, flows=[flow], clock=ManualClock(1_700_000_000.0),
                       checkpoint_every=10)
    run_id, _ = engine.start(flow, None)
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert engine.state(run_id).status == "completed"
    return store, engine, run_id


def folded(engine: uw.Engine, run_id: str, seq: int) -> tuple[RunState, RunState]:
    """The states before and after the event at ``seq``, folded from the first event."""
    history = engine.journal.history("default", run_id)
    before, _, after = states_around(RunState(tenant_id="default", run_id=run_id),
                                     history, seq)
    return before, after


def test_a_state_deep_in_the_run_equals_the_fold_from_the_start(
    run: tuple[Store, uw.Engine, str],
) -> None:
    store, engine, run_id = run
    last = store.get_run("default", run_id).last_seq  # type: ignore[union-attr]
    kept = sorted({c.seq for s in range(2, last + 1)
                   if (c := store.checkpoint_before("default", run_id, s)) is not None})
    assert len(kept) >= 5, kept  # the replaced checkpoints are kept
    seqs = {1, 2, last - 1, last, *kept, *(k + 1 for k in kept), *(k - 1 for k in kept)}
    for seq in sorted(s for s in seqs if 1 <= s <= last):
        before, rec, after = engine.journal.states_at("default", run_id, seq)
        want_before, want_after = folded(engine, run_id, seq)
        assert rec.seq == seq
        assert before.to_json() == want_before.to_json(), seq
        assert after.to_json() == want_after.to_json(), seq


def test_the_nearest_checkpoint_before_the_event_is_read_with_its_tail_only(
    run: tuple[Store, uw.Engine, str],
) -> None:
    store, _, run_id = run
    last = store.get_run("default", run_id).last_seq  # type: ignore[union-attr]
    middle = last // 2
    found = store.checkpoint_before("default", run_id, middle)
    assert found is not None
    assert found.seq < middle
    assert [e.seq for e in found.tail] == list(range(found.seq, middle + 1))
    # No kept checkpoint lies between it and the event.
    assert store.checkpoint_before("default", run_id, found.seq + 1) is not None
    assert all(store.checkpoint_before("default", run_id, s).seq == found.seq  # type: ignore[union-attr]
               for s in range(found.seq + 1, middle + 1))
    assert store.checkpoint_before("default", run_id, 1) is None


def test_dropping_a_runs_checkpoints_drops_the_kept_ones(
    run: tuple[Store, uw.Engine, str],
) -> None:
    store, engine, run_id = run
    last = store.get_run("default", run_id).last_seq  # type: ignore[union-attr]
    assert store.checkpoint_before("default", run_id, last // 2) is not None
    store.delete_checkpoints("default", run_id)
    assert all(store.checkpoint_before("default", run_id, s) is None
               for s in range(1, last + 1))
    # Still readable: folded from the first event.
    before, _, after = engine.journal.states_at("default", run_id, last // 2)
    assert after.to_json() == folded(engine, run_id, last // 2)[1].to_json()
    assert before.to_json() == folded(engine, run_id, last // 2)[0].to_json()


def _forge_kept(backend: Backend, run_id: str, seq: int) -> None:
    """Overwrite a kept checkpoint's bytes with the current checkpoint's (another state)."""
    assert backend.url is not None
    if backend.dialect == "sqlite":
        import sqlite3

        with sqlite3.connect(backend.url.removeprefix("sqlite:///")) as conn:
            n = conn.execute(
                "UPDATE checkpoint_history SET state = (SELECT state FROM checkpoints "
                "WHERE run_id = ?) WHERE run_id = ? AND seq = ?", (run_id, run_id, seq),
            ).rowcount
    else:
        import psycopg

        assert backend.direct_url is not None
        base, _, schema = backend.direct_url.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as conn:
            n = conn.execute(
                f'UPDATE "{schema}".checkpoint_history SET state = (SELECT state FROM '
                f'"{schema}".checkpoints WHERE run_id = %s) WHERE run_id = %s AND seq = %s',
                (run_id, run_id, seq),
            ).rowcount
    assert n == 1


# A kept checkpoint is forged in the database's own table: the SQL databases only.
@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_a_forged_kept_checkpoint_is_refused(
    backend: Backend, run: tuple[Store, uw.Engine, str],
) -> None:
    store, engine, run_id = run
    last = store.get_run("default", run_id).last_seq  # type: ignore[union-attr]
    found = store.checkpoint_before("default", run_id, last // 2)
    assert found is not None
    _forge_kept(backend, run_id, found.seq)
    assert store.checkpoint_before("default", run_id, last // 2).state != found.state  # type: ignore[union-attr]
    seq = found.seq + 2
    before, _, after = engine.journal.states_at("default", run_id, seq)
    want_before, want_after = folded(engine, run_id, seq)
    assert before.to_json() == want_before.to_json()
    assert after.to_json() == want_after.to_json()


def test_kept_checkpoints_are_listed_oldest_first_without_the_current_one(
    run: tuple[Store, uw.Engine, str],
) -> None:
    store, _, run_id = run
    last = store.get_run("default", run_id).last_seq  # type: ignore[union-attr]
    current = store.load_checkpoint("default", run_id)
    assert current is not None
    kept = store.kept_checkpoints("default", run_id)
    assert [seq for seq, _ in kept] == sorted(
        {c.seq for s in range(2, last + 1)
         if (c := store.checkpoint_before("default", run_id, s)) is not None} - {current[0]})
    assert all(state == store.checkpoint_before("default", run_id, seq + 1).state  # type: ignore[union-attr]
               for seq, state in kept)
    assert store.kept_checkpoints("default", "no-such-run") == []
    store.delete_checkpoints("default", run_id)
    assert store.kept_checkpoints("default", run_id) == []
