"""The inbox and registry of :class:`~underway.store.sqlite.SQLiteStore`: signals,
decision nonces and approvers."""

from __future__ import annotations

import json
import sqlite3

from ..records import ApproverRecord, SignalRecord
from .connection import _Q, Connection


class Inbox(Connection):
    """:class:`~underway.store.inbox.InboxStore` and
    :class:`~underway.store.registry.RegistryStore` on SQLite."""

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        with self._tx() as c:
            return _send_signal(c, signal)

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._query("pending_signals", tenant_id, run_id)
        ]

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """True the first time the nonce is used in the tenant (or again for the same run
        and request: a decision redelivered after a crash)."""
        with self._tx() as c:
            cur = c.execute(_Q["use_nonce"], (tenant_id, nonce, run_id, request_id, at))
            if cur.rowcount == 1:
                return True
            owner = c.execute(_Q["nonce_owner"], (tenant_id, nonce)).fetchone()
            return owner is not None and tuple(owner) == (run_id, request_id)

    # -- the registry -------------------------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        with self._tx() as c:
            c.execute(_Q["put_approver"], (
                rec.tenant_id, rec.approver_id, rec.public_key, json.dumps(list(rec.roles)),
                rec.created_at, rec.revoked_at,
            ))

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        rows = self._query("get_approver", tenant_id, approver_id)
        return _approver(rows[0]) if rows else None

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        return [_approver(r) for r in self._query("list_approvers", tenant_id)]

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        with self._tx() as c:
            return c.execute(_Q["revoke_approver"], (at, tenant_id, approver_id)).rowcount == 1


def _send_signal(c: sqlite3.Connection, s: SignalRecord) -> bool:
    """Queue a signal in the open transaction; wake its run if it waits for it."""
    cur = c.execute(
        _Q["insert_signal"],
        (s.tenant_id, s.run_id, s.signal_id, s.name, s.payload, s.sender, s.created_at),
    )
    if cur.rowcount == 0:
        return False
    c.execute(_Q["wake_for_signal"], (s.created_at, s.name, s.tenant_id, s.run_id, s.name, s.name))
    return True

def _approver(row: sqlite3.Row) -> ApproverRecord:
    return ApproverRecord(
        row[0], row[1], row[2], tuple(json.loads(row[3])), row[4], row[5]
    )
