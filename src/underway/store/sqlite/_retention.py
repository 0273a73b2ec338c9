"""Legal holds, retention's purges and sweep log, and blob deletion of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

from ... import faults
from ...errors import ConflictError
from .._sqlbase.retention import SQLRetention
from ..records import Forget, Purge
from ..retention import ForgetResult, PurgeResult, check_forget, check_purge, next_forgotten
from ._connection import _Q, Connection


class Retention(SQLRetention, Connection):
    """:class:`~underway.store.holds.HoldStore` and
    :class:`~underway.store.retention.RetentionStore` on SQLite."""

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Tombstone every event, drop checkpoints and signals, clear the error and subject, record
        the purge: one transaction, or nothing."""
        t, r = purge.tenant_id, purge.run_id
        with self._tx() as c:
            head = c.execute(_Q["purge_head"], (t, r)).fetchone()
            if head is not None and head["purged"]:
                return "already"
            check_purge(purge, None if head is None else (
                head["status"], head["last_seq"], head["events"], head["head"]))
            if head["held"]:
                return "held"
            changed = 0
            for e in purge.tombstones:
                changed += c.execute(_Q["tombstone_event"],
                                     (e.payload, t, r, e.seq, e.type, e.hash)).rowcount
            if changed != len(purge.tombstones):
                raise ConflictError(f"run {r}: an event changed since it was read; "
                                    "nothing was purged")
            faults.point("retention.purge_uncommitted")
            c.execute(_Q["delete_checkpoints_of_run"], {"tenant_id": t, "run_id": r})
            c.execute(_Q["delete_signals_of_run"], (t, r))
            c.execute(_Q["clear_run_fields"], (t, r))
            c.execute(_Q["delete_labels_of_run"], (t, r))
            c.execute(_Q["insert_purged_run"], (t, r, purge.sweep_id, purge.at,
                                                len(purge.tombstones), purge.rule))
        return "purged"

    def forget_run(self, forget: Forget) -> ForgetResult:
        """Delete every row of a purged run and append its forget log line: one
        transaction, or nothing."""
        key = {"tenant_id": forget.tenant_id, "run_id": forget.run_id}
        with self._tx() as c:
            head = c.execute(_Q["forget_head"], key).fetchone()
            if head is None:
                return "gone"
            if not head["purged"]:
                return "unpurged"
            check_forget(forget, (head["status"], head["last_seq"], head["last_hash"]))
            if head["held"]:
                return "held"
            tail = c.execute(_Q["forget_log_tail"], key).fetchone()
            line = next_forgotten(forget, None if tail is None else (
                int(tail[0]), bytes(tail[1]).hex()))
            faults.point("retention.forget_uncommitted")
            for table in self.FORGET_TABLES:
                c.execute(_Q[f"forget_{table}"], key)
            c.execute(_Q["insert_forgotten_run"], {
                **key, "seq": line.seq, "last_seq": line.last_seq,
                "head": bytes.fromhex(line.head), "sweep_id": line.sweep_id,
                "at": line.forgotten_at, "hash": bytes.fromhex(line.hash)})
        return "forgotten"
