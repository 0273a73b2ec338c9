"""The inbox and registry of :class:`~underway.store.sqlite.SQLiteStore`: signals,
decision nonces and approvers."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .._sqlbase.inbox import SQLInbox
from ..records import SignalRecord
from ._connection import _Q, Connection


class Inbox(SQLInbox, Connection):
    """:class:`~underway.store.inbox.InboxStore` and
    :class:`~underway.store.registry.RegistryStore` on SQLite."""

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        with self._tx() as c:
            return _send_signal(c, signal)

    def send_signals(self, signals: Sequence[SignalRecord]) -> list[bool]:
        """:meth:`send_signal` of each, in order, in one transaction: one flush to disk for
        them all (False for a duplicate signal_id, also of one earlier in the list)."""
        with self._tx() as c:
            return [_send_signal(c, s) for s in signals]

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used."""
        with self._tx() as c:
            cur = c.execute(_Q["use_nonce"], (tenant_id, nonce, run_id, request_id, at))
            if cur.rowcount == 1:
                return True
            owner = c.execute(_Q["nonce_owner"], (tenant_id, nonce)).fetchone()
            return owner is not None and tuple(owner) == (run_id, request_id)


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
