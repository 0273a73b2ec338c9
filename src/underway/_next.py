"""Where a run goes when a step returns (:data:`Next`: goto, sleep, wait, done, fail),
and how a child run ended (:class:`ChildOutcome`). :mod:`underway.flow` holds them
beside the steps that return them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from .events import JSON


@dataclass(frozen=True, slots=True)
class Goto:
    """Continue with ``step``."""

    step: str


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait ``seconds`` on a durable timer, then continue with ``then``."""

    seconds: float
    then: str


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for signal ``signal`` (at most ``timeout`` seconds), then continue with ``then``."""

    signal: str
    timeout: float | None
    then: str


@dataclass(frozen=True, slots=True)
class Done:
    """Finish the run with ``result``."""

    result: JSON


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail the run with ``reason``."""

    reason: str


Next = Goto | Sleep | Wait | Done | Fail
"""What a step returns: where the run goes next."""


def _seconds(duration: float | timedelta) -> float:
    return duration.total_seconds() if isinstance(duration, timedelta) else float(duration)


def _step_name(target: str | Callable[..., Any]) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", str(target))


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child run ended (what :meth:`RunContext.wait_for` returns): ``completed``
    with ``result``, or ``failed`` or ``cancelled`` with ``error`` saying why.
    ``tainted_by``: where the untrusted content that shaped its result came from (its
    :attr:`~underway.events.RunCompleted.tainted_by`; empty: none did). The run that
    receives it is shaped by that content too: its own result names those sources."""

    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: JSON = None
    error: str | None = None
    tainted_by: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the child completed."""
        return self.status == "completed"
