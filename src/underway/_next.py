"""Where a run goes when a step returns (:data:`Next`: goto, sleep, wait, done, fail),
and how a child run ended (:class:`ChildOutcome`). :mod:`underway.flow` holds them
beside the steps that return them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child run ended (what :meth:`RunContext.wait_for` returns): ``completed``
    with ``result``, or ``failed`` or ``cancelled`` with ``error`` saying why."""

    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: JSON = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the child completed."""
        return self.status == "completed"
