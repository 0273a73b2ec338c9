"""Clocks: the system clock, and a controllable one for tests."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Where the engine reads time (epoch seconds) and how it waits."""

    def now(self) -> float:
        """Current time in epoch seconds."""
        ...

    async def sleep_until(self, when: float) -> None:
        """Return at ``when`` or soon after."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        """``time.time()``."""
        return time.time()

    async def sleep_until(self, when: float) -> None:
        """Sleep in real time."""
        await asyncio.sleep(max(0.0, when - time.time()))


class ManualClock:
    """A clock that moves only when told, and jumps straight to any time awaited."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        """The current manual time."""
        return self.t

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.t += seconds

    async def sleep_until(self, when: float) -> None:
        """Jump to ``when`` without waiting."""
        self.t = max(self.t, when)
        await asyncio.sleep(0)
