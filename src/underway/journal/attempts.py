"""Why a step runs again: a continuation, or an interruption.

A step that suspends itself — an approval, a question, a retry timer, a child, a dead
letter an operator resumes — runs again as its next attempt, on purpose. Only a step
whose attempt was left unended (the worker crashed, was taken over or lost its lease)
was interrupted. Every reader counts interruptions here: ``underway runs show``, the
console, the evaluation, the drills, and the worker's takeover metrics and spans
(:func:`left_open`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ._records import Recorded

__all__ = ["ENDS_ATTEMPT", "Attempts", "left_open"]

ENDS_ATTEMPT = frozenset({
    "StepCompleted", "RetryScheduled", "ApprovalRequested", "Escalated", "RunDeadLettered",
    "ChildAwaited", "TimerSet", "SignalAwaited", "RunCompleted", "RunFailed",
    "RunCancelled",
})
"""The event types after which a step's attempt is over: it ended or suspended itself.
The next ``StepStarted`` continues the run; it was not interrupted."""


@dataclass(slots=True)
class Attempts:
    """Reads a run's event types in order and tells which step starts follow an
    interruption."""

    open: bool = False
    """A step attempt started and neither ended nor suspended itself (yet)."""
    interruptions: int = 0
    """Step starts seen so far that followed an interruption."""

    def see(self, event_type: str, attempt: int | None = None) -> bool:
        """Note the run's next event; True when it is a step start after an interruption.

        Args:
            event_type: The event's type name (a purged or sealed event's own).
            attempt: A step start's attempt, when the reader has it. A first attempt
                follows the previous step's end, so a reader that skips step ends
                (the evaluation) still counts right.
        """
        if event_type == "StepStarted":
            again, self.open = self.open and attempt != 1, True
            self.interruptions += again
            return again
        if event_type in ENDS_ATTEMPT:
            self.open = False
        return False


def left_open(records: Sequence[Recorded]) -> list[Recorded]:
    """``records``, the events of a step attempt from its ``StepStarted`` on, when the
    attempt neither ended nor suspended itself: the activation that ran it was interrupted.
    Empty otherwise.

    Args:
        records: The attempt's events (:meth:`~underway.journal.Journal.step_attempt`).
    """
    attempts = Attempts()
    for r in records:
        attempts.see(getattr(r.event, "event_type", None) or type(r.event).__name__)
    return list(records) if attempts.open else []
