"""Group commit on real databases: a worker's runs in flight commit together, each batch
fenced alone; a refused batch leaves the others of its group committed; a waiter cancelled
before its group is written has nothing written; a failed transaction reaches every
waiter; and whole flows with read-only and mutating calls end the same with it on or off."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.engine import GroupCommit
from underway.errors import FencedError, StoreError
from underway.store import AppendBatch, Lease, NewRun, Store, StoredEvent, connect

T0 = 1_000.0
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    s = connect(url)
    s.migrate()
    yield s
    s.close()


def leased(store: Store, n: int) -> list[Lease]:
    for i in range(n):
        store.create_run(NewRun(
            tenant_id="t", run_id=f"r{i}", flow="f", idempotency_key=None,
            first_event=StoredEvent(1, "RunStarted", b"{}", "1" * 64), blobs={}, step="s",
            now=T0, next_wake_at=T0,
        ))
    return store.claim(owner="w", now=T0, ttl=30, tenant_id="t", limit=n)


def step(lease: Lease, seq: int = 2, *, fence: int | None = None) -> AppendBatch:
    return AppendBatch(
        "t", lease.run_id, seq - 1, lease.token if fence is None else fence,
        [StoredEvent(seq, "StepStarted", f"{lease.run_id}-{seq}".encode(), f"{seq:064x}")],
        T0 + seq, blobs={f"blob-{lease.run_id}": lease.run_id.encode()},
    )


def seqs(store: Store, run_id: str) -> list[int]:
    return [e.seq for e in store.load_events("t", run_id)]


def test_appends_made_together_are_one_group_and_a_stale_one_is_refused_alone(
    store: Store,
) -> None:
    leases = leased(store, 8)
    committer = GroupCommit(store)
    batches = [step(lease) for lease in leases]
    batches[5] = step(leases[5], fence=leases[5].token + 1)

    async def together() -> list[Any]:
        return await asyncio.gather(*(committer.append(b) for b in batches),
                                    return_exceptions=True)

    results = asyncio.run(together())
    assert (committer.groups, committer.batches) == (1, 8)
    assert isinstance(results[5], FencedError)
    assert [r for i, r in enumerate(results) if i != 5] == [False] * 7
    for i, lease in enumerate(leases):
        assert seqs(store, lease.run_id) == ([1] if i == 5 else [1, 2])
    assert store.get_blobs("t", ["blob-r5", "blob-r4"]) == {"blob-r4": b"r4"}


def test_a_waiter_cancelled_before_its_group_is_written_has_nothing_written(
    store: Store,
) -> None:
    leases = leased(store, 3)
    committer = GroupCommit(store)

    async def scenario() -> list[Any]:
        tasks = [asyncio.create_task(committer.append(step(lease))) for lease in leases]
        await asyncio.sleep(0)  # every task has queued its batch; none is written yet
        tasks[1].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(scenario())
    assert results[0] is False and results[2] is False
    assert isinstance(results[1], asyncio.CancelledError)
    assert seqs(store, "r0") == [1, 2] and seqs(store, "r2") == [1, 2]
    assert seqs(store, "r1") == [1]
    assert committer.batches == 2


def test_a_failed_transaction_reaches_every_waiter_and_writes_nothing(
    store: Store, request: pytest.FixtureRequest
) -> None:
    leases = leased(store, 3)
    closed = connect(getattr(store, "url", None) or _url_of(request))
    closed.close()
    committer = GroupCommit(closed)

    async def together() -> list[Any]:
        return await asyncio.gather(*(committer.append(step(lease)) for lease in leases),
                                    return_exceptions=True)

    results = asyncio.run(together())
    assert all(isinstance(r, StoreError) for r in results), results
    assert all(seqs(store, lease.run_id) == [1] for lease in leases)
    assert committer.groups == 0


def _url_of(request: pytest.FixtureRequest) -> str:
    backend = request.node.callspec.params["store"]
    url: str = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    return url


def test_groups_keep_forming_while_one_is_written(store: Store) -> None:
    leases = leased(store, 40)
    committer = GroupCommit(store)

    async def steps(lease: Lease) -> None:
        for seq in range(2, 12):
            await committer.append(step(lease, seq))

    async def all_runs() -> None:
        await asyncio.gather(*(steps(lease) for lease in leases))

    asyncio.run(all_runs())
    assert committer.batches == 400
    assert committer.groups < committer.batches / 2
    assert all(seqs(store, lease.run_id) == list(range(1, 12)) for lease in leases)


# -- whole flows ------------------------------------------------------------------------
class Count(BaseModel):
    """How far a run got."""

    i: int = 0


class Steps(BaseModel):
    """How many steps a run takes."""

    n: int


SENT: Counter[str] = Counter()


async def look(args: dict[str, Any]) -> dict[str, Any]:
    return {"seen": args["i"]}


async def send(args: dict[str, Any], info: uw.CallInfo) -> str:
    SENT[info.key] += 1
    return info.key


look_tool: uw.Tool = uw.tool(look, name="look", read_only=True)
send_tool: uw.Tool = uw.tool(send, name="send", mutating=True, idempotent=False)
loop: uw.Flow[Count, Steps] = uw.Flow("grouped_loop", state=Count, input=Steps)


@loop.step
async def tick(ctx: uw.RunContext[Count, Steps]) -> Any:
    await ctx.call(look_tool, {"i": ctx.state.i})
    if ctx.state.i % 2:
        await ctx.call(send_tool, {"i": ctx.state.i})
    ctx.state.i += 1
    return ctx.goto(tick) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)


@pytest.mark.parametrize("grouped", [True, False], ids=["group", "alone"])
def test_runs_in_flight_finish_alike_with_group_commit_on_or_off(
    store: Store, grouped: bool
) -> None:
    SENT.clear()
    engine = uw.Engine(store, flows=[loop], tools=[look_tool, send_tool],
                       group_commit=grouped)
    ids = [engine.start(loop, {"n": 6}, tenant_id="t")[0] for _ in range(30)]

    async def drive() -> list[uw.RunState]:
        leases = engine.claim(tenant_id="t", limit=len(ids))
        return await asyncio.gather(*(engine.activate(lease) for lease in leases))

    states = asyncio.run(drive())
    assert sorted(s.run_id for s in states) == sorted(ids)
    assert {(s.status, s.result) for s in states} == {("completed", 6)}, states[0].error
    assert len(SENT) == 30 * 3 and set(SENT.values()) == {1}
    for run_id in ids:
        verified = engine.journal.verify("t", run_id)
        assert verified.ok, verified.reason
    if grouped:
        assert engine.committer is not None
        assert engine.committer.groups < engine.committer.batches
    else:
        assert engine.committer is None


def test_an_activation_whose_lease_was_taken_stops_and_the_group_goes_on(
    store: Store,
) -> None:
    """A run's lease taken by another worker while its step runs: its commit is refused
    inside the group the runs' step ends form, and the others of the group finish."""
    inside: list[str] = []
    gate: dict[str, asyncio.Event] = {}
    flow: uw.Flow[Count, Steps] = uw.Flow("held_loop", state=Count, input=Steps)

    async def wait_gate(args: dict[str, Any]) -> None:
        inside.append(args["run"])
        await gate["open"].wait()

    held = uw.tool(wait_gate, name="wait_gate", read_only=True)

    @flow.step
    async def first(ctx: uw.RunContext[Count, Steps]) -> Any:
        await ctx.call(held, {"run": ctx.run_id})
        ctx.state.i += 1
        return ctx.goto(first) if ctx.state.i < ctx.input.n else ctx.done(ctx.state.i)

    engine = uw.Engine(store, flows=[flow], tools=[held])
    ids = [engine.start(flow, {"n": 2}, tenant_id="t")[0] for _ in range(6)]
    victim = ids[3]

    async def drive() -> dict[str, Any]:
        gate["open"] = asyncio.Event()
        leases = engine.claim(tenant_id="t", limit=len(ids))
        runs = {lease.run_id: asyncio.create_task(engine.activate(lease)) for lease in leases}
        while len(inside) < len(ids):  # every run waits in its tool
            await asyncio.sleep(0.005)
        stolen = store.claim(owner="thief", now=engine.clock.now() + engine.lease_ttl + 1,
                             ttl=30, tenant_id="t", run_id=victim)
        assert len(stolen) == 1
        gate["open"].set()
        ended = await asyncio.gather(*runs.values(), return_exceptions=True)
        return dict(zip(runs, ended, strict=True))

    results = asyncio.run(drive())
    assert isinstance(results.pop(victim), FencedError)
    assert {(r.status, r.result) for r in results.values()} == {("completed", 2)}
    assert engine.committer is not None and engine.committer.groups < engine.committer.batches
    # nothing of the victim's step was written: its journal still ends at its start
    assert [e.type for e in store.load_events("t", victim)] == ["RunStarted"]
    for run_id in ids:
        verified = engine.journal.verify("t", run_id)
        assert verified.ok, verified.reason
