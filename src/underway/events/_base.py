"""The base of every journal event, and the JSON values events hold."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

JSON = Any
"""A JSON-compatible value: dict, list, str, int, float, bool or None."""


class Event(BaseModel):
    """Base of every journal event. Subclasses set ``type`` and ``VERSION``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    VERSION: ClassVar[int] = 1


class Encrypted(Event):
    """What a reader sees in place of an event whose payload it cannot open (it has no key,
    or the event's data key was destroyed): the event's type, while its seq and time travel
    beside it as for any event. Never journaled, and not one of the journal's event types."""

    type: Literal["Encrypted"] = "Encrypted"
    event_type: str
    """The type of the event whose payload is sealed."""
    payload: str = "[encrypted]"
