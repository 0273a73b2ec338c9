"""Schedules and intake of :class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

from ...errors import ConflictError
from .._sqlbase.schedules import SQLSchedules, schedule_record
from ..records import IntakeRecord, IntakeRequest, ScheduleRecord, SignalRecord
from ._connection import _Q, Connection, _run
from ._inbox import _signal_params
from ._journal import _run_params


class Schedules(SQLSchedules, Connection):
    """:class:`~underway.store.schedules.ScheduleStore` and
    :class:`~underway.store.intake.IntakeStore` on PostgreSQL."""

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows``, skipping rows others are claiming."""
        rows = self._all(
            "claim_schedules", now=now, until=until, flows=list(flows), limit=limit
        )
        found = [schedule_record(r) for r in rows]
        return sorted(found, key=lambda s: (s.next_fire_at, s.tenant_id, s.name))

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


class _SameKeyElsewhere(Exception):
    """Rolls back an intake whose key another transaction recorded first."""
