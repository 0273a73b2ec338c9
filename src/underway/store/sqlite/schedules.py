"""Schedules and intake of :class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import json
import sqlite3

from ..records import IntakeRecord, IntakeRequest, ScheduleRecord, SignalRecord
from .connection import _Q, Connection
from .inbox import _send_signal
from .journal import _create_run


class Schedules(Connection):
    """:class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore` on SQLite."""

    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        s = schedule
        with self._tx() as c:
            row = c.execute(_Q["put_schedule"], (
                s.tenant_id, s.name, s.flow, s.cron, s.timezone, s.input, s.queue,
                s.next_fire_at, int(s.enabled), s.created_at,
            )).fetchone()
        return _schedule(row)

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        rows = self._query("get_schedule", tenant_id, name)
        return _schedule(rows[0]) if rows else None

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        return [_schedule(r) for r in self._query("list_schedules", tenant_id)]

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        with self._tx() as c:
            return c.execute(_Q["delete_schedule"], (tenant_id, name)).rowcount > 0

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows`` under the write lock."""
        names = json.dumps(list(flows))
        # Workers ask on every round: take the database's one write lock only for a tick
        # that is due (readers never wait in WAL mode).
        due = self._query("next_schedule_at", now, names)[0][0]
        if due is None or due > now:
            return []
        with self._tx() as c:
            rows = c.execute(_Q["claim_schedules"], (until, now, now, names, limit)).fetchall()
        found = [_schedule(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        with self._tx() as c:
            cur = c.execute(
                _Q["advance_schedule"], (next_fire_at, fired_at, tenant_id, name, expected)
            )
            return cur.rowcount == 1

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        value = self._query("next_schedule_at", now, json.dumps(list(flows)))[0][0]
        return None if value is None else float(value)

    # -- intake -------------------------------------------------------------------------
    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key, in one
        transaction under the write lock."""
        r = request
        with self._tx() as c:
            seen = c.execute(_Q["get_intake"], (r.tenant_id, r.idempotency_key)).fetchone()
            if seen is not None:
                return _intake(seen), False
            owner = c.execute(_Q["entity_owner"], (r.tenant_id, r.entity_id)).fetchone()
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

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        rows = self._query("get_intake", tenant_id, idempotency_key)
        return _intake(rows[0]) if rows else None

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        rows = self._query("entity_owner", tenant_id, entity_id)
        return str(rows[0][0]) if rows else None


def _schedule(row: sqlite3.Row) -> ScheduleRecord:
    return ScheduleRecord(
        row[0], row[1], row[2], row[3], row[4], bytes(row[5]), row[6], row[7], bool(row[8]),
        row[9], row[10], row[11],
    )

def _intake(row: sqlite3.Row) -> IntakeRecord:
    return IntakeRecord(*row)
