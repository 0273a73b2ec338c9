"""Schedules and intake of :class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import json

from .._sqlbase.schedules import SQLSchedules, schedule_record
from ..records import IntakeRecord, IntakeRequest, ScheduleRecord, SignalRecord
from ._connection import _Q, Connection
from ._inbox import _send_signal
from ._journal import _create_run


class Schedules(SQLSchedules, Connection):
    """:class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore` on SQLite."""

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows`` under the write lock."""
        names = json.dumps(list(flows))
        # Workers ask on every round: take the database's one write lock only for a tick
        # that is due (readers never wait in WAL mode).
        due = self._all("next_schedule_at", now=now, flows=names)[0][0]
        if due is None or due > now:
            return []
        with self._tx() as c:
            rows = c.execute(_Q["claim_schedules"], (until, now, now, names, limit)).fetchall()
        found = [schedule_record(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

    # -- intake -------------------------------------------------------------------------
    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key, in one
        transaction under the write lock."""
        r = request
        with self._tx() as c:
            seen = c.execute(_Q["get_intake"], {
                "tenant_id": r.tenant_id, "idempotency_key": r.idempotency_key}).fetchone()
            if seen is not None:
                return IntakeRecord(*seen), False
            owner = c.execute(_Q["entity_owner"], {
                "tenant_id": r.tenant_id, "entity_id": r.entity_id}).fetchone()
            if owner is not None:
                run_id = str(owner[0])
                _send_signal(c, SignalRecord(
                    r.tenant_id, run_id, r.idempotency_key, r.signal, r.payload, r.sender, r.now
                ))
                action = "signalled"
            elif r.new_run is not None:
                run, _ = _create_run(c, r.new_run)
                run_id, action = run.run_id, "started"
                c.execute(_Q["set_entity_owner"], (r.tenant_id, r.entity_id, run_id, r.now))
            else:
                return None, False
            record = IntakeRecord(
                r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action, run_id, r.now
            )
            c.execute(_Q["insert_intake"], (
                record.tenant_id, record.idempotency_key, record.entity_id, record.event_type,
                record.action, record.run_id, record.created_at,
            ))
            return record, True
