"""Wake-ups on every backend: PostgreSQL pushes new runs, signals and runs handed back to a
listening worker (only for the queues it serves); the others push nothing, so their
watch ends at once and the worker polls."""

from __future__ import annotations

import asyncio

import pytest
from builders import signal, start

from underway.store import Store, connect
from underway.store.base import Wakeups

PATIENCE = 30.0
"""How long a test waits for a wake-up that must come before calling it lost."""


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_store_that_pushes_nothing_ends_its_watch_at_once(kind: str, sqlite_url: str) -> None:
    store = connect("memory://" if kind == "memory" else sqlite_url)
    wakeups = store.wakeups(name="w1")

    async def heard() -> int:
        return len([_ async for _ in wakeups.watch(None, retry=0.05)])

    assert asyncio.run(heard()) == 0
    assert wakeups.listening is False
    wakeups.announce(["default"])  # nobody to tell; no error
    assert store.dialect == kind
    store.close()


@pytest.mark.postgres
def test_postgres_wakes_a_listener_for_its_queues(pg_url: str) -> None:
    listener, writer = connect(pg_url), connect(pg_url)
    wakeups = listener.wakeups(name="conformance")
    assert listener.dialect == "postgres" and not wakeups.listening
    asyncio.run(_listen_and_hear(wakeups, writer))
    assert not wakeups.listening
    listener.close()
    writer.close()


@pytest.mark.postgres
def test_postgres_wakes_only_the_listeners_of_its_schema(pg_url: str, other_pg_url: str) -> None:
    """A NOTIFY channel is the database's: a run of another schema (another deployment in
    the same database) must not wake this schema's workers."""
    listener, writer, stranger = connect(pg_url), connect(pg_url), connect(other_pg_url)
    wakeups = listener.wakeups(name="conformance")

    async def hear() -> None:
        heard: asyncio.Queue[None] = asyncio.Queue()

        async def listen() -> None:
            async for _ in wakeups.watch(["mail"], retry=0.05):
                heard.put_nowait(None)

        task = asyncio.create_task(listen())
        try:
            await asyncio.wait_for(heard.get(), PATIENCE)  # listening started
            # In commit order: the other schema's run, had it woken the listener, would
            # be heard before this schema's.
            await asyncio.to_thread(start, stranger, "theirs", queue="mail")
            await asyncio.to_thread(stranger.wakeups(name="other").announce, ["mail"])
            await asyncio.to_thread(start, writer, "ours", queue="mail")
            await asyncio.wait_for(heard.get(), PATIENCE)
            assert heard.empty(), "woken by a run of another schema"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(hear())
    for store in (listener, writer, stranger):
        store.close()


async def _listen_and_hear(wakeups: Wakeups, writer: Store) -> None:
    heard: asyncio.Queue[None] = asyncio.Queue()

    async def listen() -> None:
        async for _ in wakeups.watch(["mail"], retry=0.05):
            heard.put_nowait(None)

    async def next_wakeup(what: str) -> None:
        try:
            await asyncio.wait_for(heard.get(), PATIENCE)
        except TimeoutError:
            pytest.fail(f"no wake-up for {what}")

    task = asyncio.create_task(listen())
    try:
        await next_wakeup("listening starting")  # what was sent before is lost: look
        assert wakeups.listening
        # Notifications arrive in commit order: the run of another queue, if it woke the
        # listener, would be heard before the run of "mail".
        await asyncio.to_thread(start, writer, "elsewhere", queue="default")
        await asyncio.to_thread(start, writer, "r1", queue="mail")
        await next_wakeup("a new run")
        assert heard.empty(), "woken for a run of a queue it does not serve"
        await asyncio.to_thread(writer.send_signal, signal("go", "s1", run_id="r1"))
        await next_wakeup("a signal")
        await asyncio.to_thread(wakeups.announce, ["mail"])
        await next_wakeup("runs handed back")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
