"""The in-memory store's schedules and intake (:class:`~underway.store.schedules.
ScheduleStore` and :class:`~underway.store.intake.IntakeStore`)."""

from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

from ..records import (
    FINAL,
    IntakeRecord,
    IntakeRequest,
    NewRun,
    RunRecord,
    ScheduleRecord,
    SignalRecord,
)


class MemorySchedules:
    """Cron schedules, outside events and entity owners, held in memory."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _schedules: dict[tuple[str, str], ScheduleRecord]
    _intake: dict[tuple[str, str], IntakeRecord]
    _owners: dict[tuple[str, str], str]

    if TYPE_CHECKING:
        # Written by other parts of the store.
        def create_run(self, new: NewRun) -> tuple[RunRecord, bool]: ...
        def send_signal(self, signal: SignalRecord) -> bool: ...

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        key = (schedule.tenant_id, schedule.name)
        with self._lock:
            old = self._schedules.get(key)
            new = schedule
            if old is not None:
                same = old.cron == schedule.cron and old.timezone == schedule.timezone
                new = dataclasses.replace(
                    schedule, created_at=old.created_at, last_fired_at=old.last_fired_at,
                    claimed_until=old.claimed_until,
                    next_fire_at=old.next_fire_at if same and old.enabled
                    else schedule.next_fire_at,
                )
            self._schedules[key] = new
            return new

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        return self._schedules.get((tenant_id, name))

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        with self._lock:
            return sorted(
                (s for s in self._schedules.values() if s.tenant_id == tenant_id),
                key=lambda s: s.name,
            )

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        with self._lock:
            return self._schedules.pop((tenant_id, name), None) is not None

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows``."""
        with self._lock:
            due = sorted(
                (
                    s for s in self._schedules.values()
                    if s.enabled and s.next_fire_at <= now and s.flow in flows
                    and (s.claimed_until is None or s.claimed_until < now)
                ),
                key=lambda s: (s.next_fire_at, s.tenant_id, s.name),
            )[:limit]
            claimed = [dataclasses.replace(s, claimed_until=until) for s in due]
            for s in claimed:
                self._schedules[(s.tenant_id, s.name)] = s
            return claimed

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        key = (tenant_id, name)
        with self._lock:
            s = self._schedules.get(key)
            if s is None or s.next_fire_at != expected:
                return False
            self._schedules[key] = dataclasses.replace(
                s, next_fire_at=next_fire_at, claimed_until=None,
                last_fired_at=s.last_fired_at if fired_at is None else fired_at,
            )
            return True

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        with self._lock:
            due = [
                s.next_fire_at for s in self._schedules.values()
                if s.enabled and s.flow in flows
                and (s.claimed_until is None or s.claimed_until < now)
            ]
        return min(due) if due else None

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key."""
        r = request
        with self._lock:
            seen = self._intake.get((r.tenant_id, r.idempotency_key))
            if seen is not None:
                return seen, False
            owner = self.entity_owner(r.tenant_id, r.entity_id)
            if owner is not None:
                self.send_signal(SignalRecord(
                    r.tenant_id, owner, r.idempotency_key, r.signal, r.payload, r.sender, r.now
                ))
                action, run_id = "signalled", owner
            elif r.new_run is not None:
                run, _ = self.create_run(r.new_run)
                self._owners[(r.tenant_id, r.entity_id)] = run.run_id
                action, run_id = "started", run.run_id
            else:
                return None, False
            record = IntakeRecord(
                r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action, run_id, r.now
            )
            self._intake[(r.tenant_id, r.idempotency_key)] = record
            return record, True

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        return self._intake.get((tenant_id, idempotency_key))

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        with self._lock:
            run_id = self._owners.get((tenant_id, entity_id))
            run = None if run_id is None else self._runs.get((tenant_id, run_id))
            return run_id if run is not None and run.status not in FINAL else None
