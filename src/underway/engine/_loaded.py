"""What an activation starts from: a leased run as read from the store in one trip."""

from __future__ import annotations

from dataclasses import dataclass

from .. import events as ev
from ..journal.state import Recorded, RunState
from ..store.base import RunRecord
from ._inbox import OpenedSignal


@dataclass(frozen=True, slots=True)
class Loaded:
    """A leased run as read from the store in one trip."""

    row: RunRecord
    state: RunState
    head: str
    refused: ev.CheckpointRefused | None
    signals: list[OpenedSignal]
    interrupted: list[Recorded]
    """On a takeover, with telemetry on: the events of the step attempt left unended."""


def taken_over(state: RunState) -> bool:
    """Whether a step started and did not complete (:func:`~underway.journal.attempts.left_open`
    tells from its events if it was taken over)."""
    return state.status == "ready" and state.attempt > 0
