"""A tool call bounded by its timeout (:func:`underway.effects._bounded.bounded`): a call
that returns without waiting needs no timer, one that waits is bounded as
``asyncio.timeout`` bounds it, and cancellation reaches the call either way."""

from __future__ import annotations

import asyncio
import contextvars
import time

import pytest

from underway.effects._bounded import bounded
from underway.events import canonical_json

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="")


async def _now(value: int) -> int:
    return value


async def _waits(value: int, event: asyncio.Event) -> int:
    await event.wait()
    return value


def test_a_call_that_never_waits_returns_its_value() -> None:
    assert asyncio.run(bounded(_now(7), 0.001)) == 7


def test_a_call_that_waits_returns_its_value_in_the_same_task() -> None:
    async def main() -> tuple[int, bool]:
        event = asyncio.Event()
        task = asyncio.current_task()
        inside: list[asyncio.Task[object] | None] = []

        async def call() -> int:
            inside.append(asyncio.current_task())
            return await _waits(3, event)

        asyncio.get_running_loop().call_soon(event.set)
        got = await bounded(call(), 5.0)
        return got, inside == [task]

    assert asyncio.run(main()) == (3, True)


def test_a_call_that_waits_too_long_times_out_and_is_cancelled() -> None:
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> None:
        await bounded(forever(), 0.01)

    with pytest.raises(TimeoutError):
        asyncio.run(main())
    assert cancelled.is_set()


def test_the_deadline_counts_from_before_the_call_began() -> None:
    async def busy_then_waits() -> str:
        time.sleep(0.05)  # holds the loop past the whole timeout before its first await
        await asyncio.sleep(0)
        await asyncio.Event().wait()
        return "never"

    with pytest.raises(TimeoutError):
        asyncio.run(bounded(busy_then_waits(), 0.02))


def test_cancelling_the_caller_cancels_the_waiting_call() -> None:
    got: list[str] = []

    async def call() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            got.append("cancelled")
            raise

    async def main() -> None:
        task = asyncio.create_task(bounded(call(), None))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert got == ["cancelled"]


def test_a_call_that_catches_a_cancellation_and_returns_gives_its_value() -> None:
    async def stubborn(event: asyncio.Event) -> str:
        try:
            await event.wait()
        except asyncio.CancelledError:
            return "caught"
        return "set"

    async def main() -> str:
        task = asyncio.create_task(bounded(stubborn(asyncio.Event()), None))
        await asyncio.sleep(0)
        task.cancel()
        return await task

    assert asyncio.run(main()) == "caught"


def test_errors_pass_through_unchanged_waiting_or_not() -> None:
    async def fails_now() -> None:
        raise KeyError("now")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    with pytest.raises(KeyError, match="now"):
        asyncio.run(bounded(fails_now(), 1.0))
    with pytest.raises(KeyError, match="later"):
        asyncio.run(bounded(fails_later(), 1.0))


def test_context_variables_set_by_the_call_stay_in_the_callers_context() -> None:
    async def sets() -> str:
        _seen.set("tool")
        await asyncio.sleep(0)
        return _seen.get()

    async def main() -> tuple[str, str]:
        got = await bounded(sets(), 1.0)
        return got, _seen.get()

    assert asyncio.run(main()) == ("tool", "tool")


def test_an_awaitable_that_is_no_coroutine_is_bounded_too() -> None:
    async def main() -> int:
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, 9)
        return await bounded(fut, 1.0)

    assert asyncio.run(main()) == 9


def test_canonical_json_refuses_a_cycle_as_a_value_error() -> None:
    cycle: dict[str, object] = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError):
        canonical_json(cycle)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not JSON serializable"):
        canonical_json({"a": object()})  # type: ignore[dict-item]
    with pytest.raises(ValueError):
        canonical_json({"a": float("nan")})
    assert canonical_json({"b": [1, 2.5, None, True], "a": "é"}) == \
        '{"a":"é","b":[1,2.5,null,true]}'.encode()
