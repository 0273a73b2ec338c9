"""What the knowledge base holds: records with provenance, retention and access policy."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..errors import ConfigurationError
from ..subjects import check_subject

Sensitivity = Literal["public", "internal", "personal", "sensitive"]
"""How much harm disclosure does, lowest first; a reader capped at one label sees it and
every label before it."""

SENSITIVITIES: tuple[Sensitivity, ...] = ("public", "internal", "personal", "sensitive")
"""Every sensitivity label, in increasing order."""

_Text = Annotated[str, Field(min_length=1)]
_Time = Annotated[float, Field(allow_inf_nan=False)]


class KnowledgeRecord(BaseModel):
    """One piece of long-term knowledge of a tenant.

    ``source`` says where it came from (a URL, ``system``, ``tool:<name>``, ``run:<id>``);
    ``created_at`` and ``expires_at`` are epoch seconds, and a record whose ``expires_at``
    has passed is never returned by a search, even before the sweeper erases it;
    ``roles`` lists the roles that may read it (empty: every role of the tenant);
    ``sensitivity`` caps who may see it further; ``metadata`` is any JSON object;
    ``subject`` names the data subject it is about (an opaque id): with encryption on it
    is sealed under that subject's key, and erasing the subject deletes it.
    Putting a record with the ``id`` of an existing one of the same tenant replaces it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: _Text = Field(default_factory=lambda: uuid.uuid4().hex)
    tenant_id: _Text
    text: _Text
    source: _Text
    created_at: _Time
    expires_at: _Time | None = None
    roles: tuple[_Text, ...] = ()
    sensitivity: Sensitivity = "internal"
    metadata: dict[str, Any] = Field(default_factory=dict)
    subject: str | None = None

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str | None) -> str | None:
        try:
            return None if value is None else check_subject(value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("id", "tenant_id", "text", "source", "roles")
    @classmethod
    def _no_nul(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        # PostgreSQL text cannot hold NUL; refusing it everywhere keeps backends alike.
        if any("\x00" in v for v in ((value,) if isinstance(value, str) else value)):
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("text")
    @classmethod
    def _has_words(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("text is blank; a knowledge record must say something")
        return text

    @field_validator("metadata")
    @classmethod
    def _is_json(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        try:
            json.dumps(metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metadata must be a JSON object: {exc}") from None
        if _has_nul(metadata):
            raise ValueError("metadata must not contain NUL characters")
        return metadata

    @model_validator(mode="after")
    def _expires_after_creation(self) -> KnowledgeRecord:
        if self.expires_at is not None and self.expires_at <= self.created_at:
            raise ValueError(
                f"expires_at ({self.expires_at}) must be later than created_at "
                f"({self.created_at})"
            )
        return self

    def expired(self, now: float) -> bool:
        """Whether the retention period has run out at ``now``."""
        return self.expires_at is not None and self.expires_at <= now


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


@dataclass(frozen=True, slots=True)
class KnowledgeHit:
    """A record found by a search and how well it matched (higher is better).

    Scores order the hits of one search; they are not comparable across searches or
    backends.
    """

    record: KnowledgeRecord
    score: float


@dataclass(frozen=True, slots=True)
class Reindexed:
    """What :meth:`~underway.knowledge.base.KnowledgeBase.reindex` did: how many records
    it indexed again under the words this version of underway splits their text into,
    and how many it left as they were because they are sealed and their tenant's keys
    are not in this process (give the keys and run it again)."""

    records: int
    sealed_without_keys: int
