"""Legal holds, retention's purges and sweep log, and blob deletion of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

from ... import faults
from ...errors import ConflictError
from .._sqlbase.retention import SQLRetention
from ..records import Forget, Purge
from ..retention import ForgetResult, PurgeResult, check_forget, check_purge, next_forgotten
from ._connection import _Q, Connection


class Retention(SQLRetention, Connection):
    """:class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore` on PostgreSQL."""

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Tombstone every event, drop checkpoints and signals, clear the error and subject, record
        the purge: one transaction, or nothing."""
        key = {"tenant_id": purge.tenant_id, "run_id": purge.run_id}
        stones = purge.tombstones
        with self._pool.connection() as conn, conn.transaction():
            head = conn.execute(_Q["purge_head"], key).fetchone()
            if head is not None and head[3]:
                return "already"
            check_purge(purge, None if head is None else (
                str(head[0]), int(head[1]), int(head[4]), int(head[5])))
            assert head is not None  # check_purge refuses a run that is gone
            if head[2]:
                return "held"
            changed = conn.execute(_Q["tombstone_events"], {
                **key, "seqs": [e.seq for e in stones], "types": [e.type for e in stones],
                "payloads": [e.payload for e in stones], "hashes": [e.hash for e in stones],
            }).rowcount
            if changed != len(stones):
                # Raising rolls the transaction back: nothing is purged.
                raise ConflictError(f"run {purge.run_id}: an event changed since it was "
                                    "read; nothing was purged")
            faults.point("retention.purge_uncommitted")
            conn.execute(_Q["delete_checkpoints_of_run"], key)
            conn.execute(_Q["delete_signals_of_run"], key)
            conn.execute(_Q["clear_run_fields"], key)
            conn.execute(_Q["delete_labels_of_run"], key)
            conn.execute(_Q["insert_purged_run"], {
                **key, "sweep_id": purge.sweep_id, "at": purge.at, "events": len(stones),
                "rule": purge.rule,
            })
        return "purged"

    def forget_run(self, forget: Forget) -> ForgetResult:
        """Delete every row of a purged run and append its forget log line: one
        transaction, or nothing."""
        key = {"tenant_id": forget.tenant_id, "run_id": forget.run_id}
        with self._pool.connection() as conn, conn.transaction():
            head = conn.execute(_Q["forget_head"], key).fetchone()
            if head is None:
                return "gone"
            if not head[3]:
                return "unpurged"
            check_forget(forget, (str(head[0]), int(head[1]), str(head[2])))
            if head[4]:
                return "held"
            conn.execute(_Q["forget_log_lock"], key)
            tail = conn.execute(_Q["forget_log_tail"], key).fetchone()
            line = next_forgotten(forget, None if tail is None else (
                int(tail[0]), bytes(tail[1]).hex()))
            faults.point("retention.forget_uncommitted")
            for table in self.FORGET_TABLES:
                conn.execute(_Q[f"forget_{table}"], key)
            conn.execute(_Q["insert_forgotten_run"], {
                **key, "seq": line.seq, "last_seq": line.last_seq,
                "head": bytes.fromhex(line.head), "sweep_id": line.sweep_id,
                "at": line.forgotten_at, "hash": bytes.fromhex(line.hash)})
        return "forgotten"
