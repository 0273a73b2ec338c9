"""Schedules' and intake's reads and single statements, as both SQL dialects run them
(claiming schedules and applying an intake event differ by dialect)."""

from __future__ import annotations

from typing import Any

from ..records import IntakeRecord, ScheduleRecord
from .dialect import SQLBase


class SQLSchedules(SQLBase):
    """The shared part of :class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore`."""

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        s = schedule
        rows = self._written(
            "put_schedule", tenant_id=s.tenant_id, schedule=s.name, flow=s.flow, cron=s.cron,
            timezone=s.timezone, input=s.input, queue=s.queue, next_fire_at=s.next_fire_at,
            enabled=s.enabled, created_at=s.created_at,
        )
        return schedule_record(rows[0])

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        rows = self._all("get_schedule", tenant_id=tenant_id, schedule=name)
        return schedule_record(rows[0]) if rows else None

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        return [schedule_record(r) for r in self._all("list_schedules", tenant_id=tenant_id)]

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        return self._count("delete_schedule", tenant_id=tenant_id, schedule=name) > 0

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        return self._count(
            "advance_schedule", tenant_id=tenant_id, schedule=name, expected=expected,
            next_fire_at=next_fire_at, fired_at=fired_at,
        ) == 1

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        rows = self._all("next_schedule_at", now=now, flows=self._array(flows))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    # -- intake -------------------------------------------------------------------------
    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        rows = self._all("get_intake", tenant_id=tenant_id, idempotency_key=idempotency_key)
        return IntakeRecord(*rows[0]) if rows else None

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        rows = self._all("entity_owner", tenant_id=tenant_id, entity_id=entity_id)
        return str(rows[0][0]) if rows else None


def schedule_record(row: Any) -> ScheduleRecord:
    """A row of the schedules table as a record."""
    return ScheduleRecord(
        row[0], row[1], row[2], row[3], row[4], bytes(row[5]), row[6], row[7], bool(row[8]),
        row[9], row[10], row[11],
    )
