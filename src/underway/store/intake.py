"""The intake role: outside events acted on once, routed to the run that owns their entity."""

from __future__ import annotations

from typing import Protocol

from .records import IntakeRecord, IntakeRequest

__all__ = ["IntakeStore"]


class IntakeStore(Protocol):
    """Applies outside events exactly once and remembers which run owns which entity."""

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Act on an outside event once per (tenant, idempotency key), in one transaction.

        When the key was seen before, return its record and False. Otherwise, if a run that
        is not finished owns the entity, deliver the signal to it; else create
        ``request.new_run`` (or find the run with its idempotency key) and record it as the
        entity's owner. The record is written with the effect and returned with True.
        Returns (None, False) and writes nothing when no live run owns the entity and
        ``new_run`` is None. Events for one entity are serialized.
        """
        ...

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """What the event with this idempotency key did, if it was acted on."""
        ...

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The run that owns the entity, if it is not finished."""
        ...
