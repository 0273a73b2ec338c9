"""Schedules and intake of a :class:`~underway.store.regional.RegionalStore`: each
tenant's schedules and outside events in its region."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..base import Store
from ..records import IntakeRecord, IntakeRequest, ScheduleRecord
from ._leases import earliest


class RegionalSchedules:
    """The :class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore` of a regional store."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Store a schedule in its tenant's region."""
        return self._of(schedule.tenant_id).put_schedule(schedule)

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """A schedule, from the tenant's region."""
        return self._of(tenant_id).get_schedule(tenant_id, name)

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """The tenant's schedules, from its region."""
        return self._of(tenant_id).list_schedules(tenant_id)

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule in the tenant's region."""
        return self._of(tenant_id).delete_schedule(tenant_id, name)

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due schedules from each region, earliest first overall."""
        found: list[ScheduleRecord] = []
        for s in self._all():
            if len(found) >= limit:
                break
            found += s.claim_schedules(now=now, until=until, flows=flows,
                                       limit=limit - len(found))
        return sorted(found, key=lambda r: (r.next_fire_at, r.tenant_id, r.name))

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """End a schedule's claim in the tenant's region."""
        return self._of(tenant_id).advance_schedule(
            tenant_id, name, expected=expected, next_fire_at=next_fire_at, fired_at=fired_at)

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """The earliest schedule of every region."""
        return earliest(s.next_schedule_at(now=now, flows=flows) for s in self._all())

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Act on an outside event in its tenant's region."""
        return self._of(request.tenant_id).apply_intake(request)

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """An intake record, from the tenant's region."""
        return self._of(tenant_id).get_intake(tenant_id, idempotency_key)

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """An entity's owner, from the tenant's region."""
        return self._of(tenant_id).entity_owner(tenant_id, entity_id)
