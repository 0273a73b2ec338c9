"""Steps and what they record: a step's start and end, non-deterministic values, timers, and
an agent's plan and choices."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import JSON, Event


class StepStarted(Event):
    """A step began executing (attempt counts re-executions after a crash)."""

    type: Literal["StepStarted"] = "StepStarted"
    step: str
    attempt: int = 1
    worker: str | None = None
    """The owner id of the worker that ran this attempt (:func:`~underway.identity.
    worker_identity`); None in journals written before it was recorded."""


class StepCompleted(Event):
    """A step finished: where the run goes next and the RFC 6902 patch of its state."""

    type: Literal["StepCompleted"] = "StepCompleted"
    step: str
    next: str | None
    patch: list[JSON]
    child_taint: list[str] = Field(default_factory=list)
    """Where the untrusted content of the child outcomes the step received came from
    (:attr:`~underway.events.ChildFinished.tainted_by`), as far as the run had not received
    it before. Empty: none, as for every step completed before it was recorded."""


class ValueRecorded(Event):
    """A non-deterministic value (time, uuid, random) observed by a step."""

    type: Literal["ValueRecorded"] = "ValueRecorded"
    kind: Literal["now", "uuid", "random"]
    index: int
    value: JSON


class VersionMarked(Event):
    """A run asked ``ctx.version(change_id)`` for the first time: ``patched`` says whether
    it takes the new code path of that change (True) or keeps the old one (False, because
    the step's journal already went past this point without the change). Every later
    ``ctx.version`` of the same change in the run gives the same answer."""

    type: Literal["VersionMarked"] = "VersionMarked"
    change_id: str
    patched: bool
    step: str


class TimerSet(Event):
    """A durable timer: the run wakes at ``wake_at`` (epoch seconds)."""

    type: Literal["TimerSet"] = "TimerSet"
    timer_id: str
    wake_at: float


class TimerFired(Event):
    """A timer came due (for a wait, this means the wait timed out)."""

    type: Literal["TimerFired"] = "TimerFired"
    timer_id: str


class PlanCreated(Event):
    """An agent's plan for its goal."""

    type: Literal["PlanCreated"] = "PlanCreated"
    plan: list[str]
    model: str | None = None


class PlanRevised(Event):
    """An agent revised its plan after an observation."""

    type: Literal["PlanRevised"] = "PlanRevised"
    plan: list[str]
    reason: str = ""


class ToolSelected(Event):
    """An agent's model chose the next tool call (before policy, approval or sandbox)."""

    type: Literal["ToolSelected"] = "ToolSelected"
    tool: str
    args: JSON
    reason: str = ""
    tainted: list[str] = Field(default_factory=list)
    """Where the untrusted content in the model's context came from when it chose this call
    (tool names, ``signal:<name>``, ``intake``): the arguments may carry any of it."""
    sensitive_fields: list[str] | None = None
    """The fields of the tool's arguments and result it declares sensitive
    (:mod:`underway.redaction`)."""
    secret_fields: list[str] | None = None
    """The fields of its argument and result models typed as secrets."""
