"""The inbox and registry of :class:`~underway.store.postgres.PostgresStore`: signals,
decision nonces and approvers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._sqlbase.inbox import SQLInbox
from ..records import SignalRecord
from ._connection import _Q, Connection
from ._pipelines import pipelined


class Inbox(SQLInbox, Connection):
    """:class:`~underway.store.inbox.InboxStore` and
    :class:`~underway.store.registry.RegistryStore` on PostgreSQL."""

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        params = _signal_params(signal)
        with self._pool.connection() as conn:
            with pipelined(conn):
                conn.execute(_Q["lock_run"], params, prepare=True)
                sent = conn.execute(_Q["send_signal"], params, prepare=True)
                conn.execute(_Q["notify_run"], params, prepare=True)
            row = sent.fetchone()
        return bool(row and row[0])

    def send_signals(self, signals: Sequence[SignalRecord]) -> list[bool]:
        """:meth:`send_signal` of each, in one transaction: one commit for them all (False
        for a duplicate signal_id, also of one earlier in the list). Runs are locked in
        (tenant, run) order, the order of the journal's group commits, so neither can
        deadlock the other."""
        order = sorted(range(len(signals)),
                       key=lambda i: (signals[i].tenant_id, signals[i].run_id))
        sent: list[bool] = [False] * len(signals)
        with self._pool.connection() as conn:
            # One pipeline, one sync: the statements are one implicit transaction.
            with pipelined(conn):
                answers = []
                for i in order:
                    params = _signal_params(signals[i])
                    conn.execute(_Q["lock_run"], params, prepare=True)
                    answers.append((i, conn.execute(_Q["send_signal"], params, prepare=True)))
                    conn.execute(_Q["notify_run"], params, prepare=True)
            for i, answer in answers:
                row = answer.fetchone()
                sent[i] = bool(row and row[0])
        return sent

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used."""
        if self._all(
            "use_nonce", tenant_id=tenant_id, nonce=nonce, run_id=run_id,
            request_id=request_id, at=at,
        ):
            return True
        owner = self._all("nonce_owner", tenant_id=tenant_id, nonce=nonce)
        return bool(owner) and tuple(owner[0]) == (run_id, request_id)


def _signal_params(s: SignalRecord) -> dict[str, Any]:
    """Parameters of the ``send_signal`` query."""
    return {
        "tenant_id": s.tenant_id, "run_id": s.run_id, "signal_id": s.signal_id,
        "name": s.name, "payload": s.payload, "sender": s.sender,
        "created_at": s.created_at,
    }
