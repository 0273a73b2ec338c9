"""How the run page shows journaled events: each with its time, its kind, the one-line
summary ``underway runs show`` prints (:mod:`underway.ops.timeline`) and every field for the
expandable details — JSON pretty-printed, long values cut — and the state after an event
with the patch from the state before it. Everything here is text: the templates escape it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ...client import Recorded, RunEvent, RunState
from ...events import JSON, PURGED, PayloadPurged
from ...journal.patch import make_patch
from ...ops.timeline import format_time, lines
from ...redaction import Redactor

PAGE = 200
"""Events on a page of the timeline: page ``n`` holds seqs ``(n-1)*PAGE+1`` to
``n*PAGE``, so a page holds the same events however far the run has gone since."""
CUT = 4000
"""Characters of one field shown in the details; the API's events carry the rest."""
INLINE = 100
"""A field whose JSON is at most this long is shown on one line, as it is."""
STATE_CUT = 200_000
"""Characters of a state (or a patch) the page shows."""

_FAMILIES: dict[str, tuple[str, ...]] = {
    "run": ("RunStarted", "InputChecked", "RunCompleted", "RunFailed", "RunCancelled",
            "RunDeadLettered", "RunResumed", "CheckpointRefused"),
    "step": ("StepStarted", "StepCompleted", "ValueRecorded"),
    "tool": ("ToolStarted", "ToolSucceeded", "ToolFailed", "ToolTimedOut",
             "ToolOutcomeUnknown", "ToolReconciled", "SchemaValidationFailed",
             "RetryScheduled", "ToolRefused", "ToolShadowed"),
    "model": ("ModelResponded",),
    "policy": ("PolicyDecided", "BudgetExceeded"),
    "approval": ("ApprovalRequested", "ApprovalGranted", "ApprovalRejected", "ApprovalInvalid",
                 "ApprovalExpired"),
    "escalation": ("Escalated", "EscalationResolved", "EscalationAnswered",
                   "EscalationExpired"),
    "timer": ("TimerSet", "TimerFired"),
    "signal": ("SignalAwaited", "SignalReceived", "SignalIgnored"),
    "child": ("ChildStarted", "ChildAwaited", "ChildFinished"),
    "agent": ("PlanCreated", "PlanRevised", "ToolSelected"),
}
FAMILY = {t: family for family, types in _FAMILIES.items() for t in types}
"""The kind of each event type, which the page colours it by."""


@dataclass(frozen=True, slots=True)
class Field:
    """One field of an event: its name and its value as text; ``block`` when the text is
    pretty-printed JSON or runs over lines (shown preformatted)."""

    name: str
    text: str
    block: bool


@dataclass(frozen=True, slots=True)
class EventView:
    """One event as the timeline shows it."""

    seq: int
    time: str
    type: str
    family: str
    summary: str
    fields: tuple[Field, ...]

    @property
    def page(self) -> int:
        """The timeline page that holds this event."""
        return (self.seq - 1) // PAGE + 1


def pretty(value: JSON, limit: int = CUT) -> str:
    """``value`` as indented JSON, cut to ``limit`` characters (saying how much is left)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… {len(text) - limit} more characters"


def _field(name: str, value: JSON) -> Field:
    if isinstance(value, str):
        return Field(name, _cut(value, CUT), "\n" in value or len(value) > INLINE)
    # Small values read best on one line; only larger ones are worth indenting.
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
    if len(text) <= INLINE:
        return Field(name, text, False)
    return Field(name, pretty(value), True)


def views(events: Sequence[RunEvent]) -> list[EventView]:
    """The timeline entries of ``events`` (in order: a summary may depend on the events
    before it on the same page, such as an outcome settled after an interruption)."""
    records = [Recorded(e.seq, e.at, e.event) for e in events]
    out = []
    for e, line in zip(events, lines(records), strict=True):
        data = e.event.model_dump(mode="json")
        data.pop("type", None)
        if isinstance(e.event, PayloadPurged):
            data = {**e.event.kept, "payload": PURGED}
        out.append(EventView(
            seq=e.seq, time=format_time(e.at), type=line.type,
            family=FAMILY.get(line.type, "other"), summary=line.summary,
            fields=tuple(_field(k, v) for k, v in data.items()),
        ))
    return out


@dataclass(frozen=True, slots=True)
class StateAt:
    """The run's state after the event at ``seq`` and the RFC 6902 patch that the event
    made to the state before it."""

    event: EventView
    state: dict[str, JSON]
    patch: list[JSON]

    @property
    def state_text(self) -> str:
        """The state as the page shows it (indented JSON, cut past :data:`STATE_CUT`)."""
        return pretty(self.state, STATE_CUT)

    @property
    def patch_text(self) -> str:
        """The patch as the page shows it."""
        return pretty(self.patch, STATE_CUT)

    def to_json(self) -> dict[str, JSON]:
        """What the page's script receives."""
        return {"seq": self.event.seq, "type": self.event.type, "time": self.event.time,
                "summary": self.event.summary, "state": self.state, "patch": self.patch}


def state_at(before: RunState, rec: Recorded, after: RunState, hide: Redactor) -> StateAt:
    """The view of :meth:`~underway.client.Client.state_at`'s answer, with what ``hide``
    hides redacted (in the states before the patch is made, so the patch shows no more)."""
    old, new = hide.json(before.to_json()), hide.json(after.to_json())
    assert isinstance(old, dict) and isinstance(new, dict)
    event = views([RunEvent(rec.seq, rec.at, hide.event(rec.event), "")])[0]
    return StateAt(event, new, make_patch(old, new))
