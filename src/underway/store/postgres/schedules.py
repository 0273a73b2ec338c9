"""Schedules and intake of :class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

from typing import Any

from ...errors import ConflictError
from ..records import IntakeRecord, IntakeRequest, ScheduleRecord, SignalRecord
from .connection import _Q, Connection, _run
from .inbox import _signal_params
from .journal import _run_params


class Schedules(Connection):
    """:class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore` on PostgreSQL."""

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        s = schedule
        rows = self._all(
            "put_schedule", tenant_id=s.tenant_id, schedule=s.name, flow=s.flow, cron=s.cron,
            timezone=s.timezone, input=s.input, queue=s.queue, next_fire_at=s.next_fire_at,
            enabled=s.enabled, created_at=s.created_at,
        )
        return _schedule(rows[0])

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        rows = self._all("get_schedule", tenant_id=tenant_id, schedule=name)
        return _schedule(rows[0]) if rows else None

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        return [_schedule(r) for r in self._all("list_schedules", tenant_id=tenant_id)]

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        return self._count("delete_schedule", tenant_id=tenant_id, schedule=name) > 0

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows``, skipping rows others are claiming."""
        rows = self._all(
            "claim_schedules", now=now, until=until, flows=list(flows), limit=limit
        )
        found = [_schedule(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

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
        rows = self._all("next_schedule_at", now=now, flows=list(flows))
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    # -- intake -------------------------------------------------------------------------
    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key, in one
        transaction; events for one entity take turns on an advisory lock."""
        r = request
        key = {
            "tenant_id": r.tenant_id, "entity_id": r.entity_id,
            "idempotency_key": r.idempotency_key,
        }
        with self._pool.connection() as conn:
            try:
                with conn.transaction():
                    conn.execute(_Q["lock_intake_entity"], key)
                    seen = conn.execute(_Q["get_intake"], key).fetchone()
                    if seen is not None:
                        return IntakeRecord(*seen), False
                    owner = conn.execute(_Q["lock_entity_owner"], key).fetchone()
                    if owner is not None:
                        run_id, action = str(owner[0]), "signalled"
                        conn.execute(_Q["send_signal"], _signal_params(SignalRecord(
                            r.tenant_id, run_id, r.idempotency_key, r.signal, r.payload,
                            r.sender, r.now,
                        )))
                    elif r.new_run is not None:
                        params = _run_params(r.new_run)
                        row = conn.execute(_Q["create_run"], params).fetchone()
                        if row is None and r.new_run.idempotency_key is not None:
                            row = conn.execute(_Q["find_by_idempotency"], params).fetchone()
                        if row is None:
                            raise ConflictError(
                                f"run {r.new_run.run_id} already exists in tenant {r.tenant_id}"
                            )
                        run_id, action = _run(row).run_id, "started"
                        conn.execute(
                            _Q["set_entity_owner"], {**key, "run_id": run_id, "now": r.now}
                        )
                    else:
                        return None, False
                    conn.execute(_Q["notify_run"], {"tenant_id": r.tenant_id, "run_id": run_id})
                    record = IntakeRecord(
                        r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action,
                        run_id, r.now,
                    )
                    inserted = conn.execute(_Q["insert_intake"], {
                        **key, "event_type": r.event_type, "action": action, "run_id": run_id,
                        "now": r.now,
                    }).fetchone()
                    if inserted is None:
                        raise _SameKeyElsewhere
                    return record, True
            except _SameKeyElsewhere:
                # The same key arrived for another entity and committed first: undone here.
                pass
            seen = conn.execute(_Q["get_intake"], key).fetchone()
        if seen is None:
            raise ConflictError(f"intake key {r.idempotency_key!r} was neither new nor recorded")
        return IntakeRecord(*seen), False

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        rows = self._all("get_intake", tenant_id=tenant_id, idempotency_key=idempotency_key)
        return IntakeRecord(*rows[0]) if rows else None

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        rows = self._all("entity_owner", tenant_id=tenant_id, entity_id=entity_id)
        return str(rows[0][0]) if rows else None


class _SameKeyElsewhere(Exception):
    """Rolls back an intake whose key another transaction recorded first."""

def _schedule(row: tuple[Any, ...]) -> ScheduleRecord:
    return ScheduleRecord(
        row[0], row[1], row[2], row[3], row[4], bytes(row[5]), row[6], row[7], bool(row[8]),
        row[9], row[10], row[11],
    )
