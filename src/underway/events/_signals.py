"""What reaches a run from outside: signals, and the child runs it starts and waits for."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import JSON, Event


class SignalAwaited(Event):
    """The run waits for a named signal, optionally until a timer fires."""

    type: Literal["SignalAwaited"] = "SignalAwaited"
    signal: str
    timer_id: str | None = None


class SignalReceived(Event):
    """An outside signal was delivered to the run."""

    type: Literal["SignalReceived"] = "SignalReceived"
    signal: str
    signal_id: str
    payload: JSON
    sender: str | None = None


class SignalIgnored(Event):
    """A control signal that did not apply (e.g. a resolve for a run not escalated)."""

    type: Literal["SignalIgnored"] = "SignalIgnored"
    signal: str
    signal_id: str
    reason: str


class ChildStarted(Event):
    """The run starts a child run (``ctx.start``): committed before the child is created,
    with the child's run id, so a step re-run after a crash starts the same child and a
    cancel of this run reaches it. ``detached``: cancelling this run leaves it running."""

    type: Literal["ChildStarted"] = "ChildStarted"
    run_id: str
    flow: str
    key: str
    detached: bool = False


class ChildAwaited(Event):
    """The run waits (holding no worker) for child ``run_id`` to end (``ctx.wait_for``)."""

    type: Literal["ChildAwaited"] = "ChildAwaited"
    run_id: str


class ChildFinished(Event):
    """Child ``run_id`` ended: ``completed`` with ``result``, ``failed`` or ``cancelled``
    with ``error``."""

    type: Literal["ChildFinished"] = "ChildFinished"
    run_id: str
    status: Literal["completed", "failed", "cancelled"]
    result: JSON = None
    error: str | None = None
    tainted_by: list[str] = Field(default_factory=list)
    """Where the untrusted content that shaped a completed child's result came from (its
    :attr:`~underway.events.RunCompleted.tainted_by`). Empty: none did, as for every child
    that ended before it was recorded."""
    marks: list[dict[str, JSON]] = Field(default_factory=list)
    """The parts of a completed child's result that trusted sources do not account for
    (its :attr:`~underway.events.RunCompleted.marks`). Empty: none, as for every child that
    ended before they were recorded."""
