"""The base of every journal event, and the JSON values events hold."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

JSON = Any
"""A JSON-compatible value: dict, list, str, int, float, bool or None."""


class Event(BaseModel):
    """Base of every journal event. Subclasses set ``type`` and ``VERSION``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    VERSION: ClassVar[int] = 1
