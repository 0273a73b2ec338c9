"""The inbox and registry of :class:`~underway.store.postgres.PostgresStore`: signals,
decision nonces and approvers."""

from __future__ import annotations

from typing import Any

from ..records import ApproverRecord, SignalRecord
from .connection import _Q, Connection


class Inbox(Connection):
    """:class:`~underway.store.inbox.InboxStore` and
    :class:`~underway.store.registry.RegistryStore` on PostgreSQL."""

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        params = _signal_params(signal)
        with self._pool.connection() as conn:
            with conn.pipeline():
                conn.execute(_Q["lock_run"], params, prepare=True)
                sent = conn.execute(_Q["send_signal"], params, prepare=True)
                conn.execute(_Q["notify_run"], params, prepare=True)
            row = sent.fetchone()
        return bool(row and row[0])

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._all("pending_signals", tenant_id=tenant_id, run_id=run_id)
        ]

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """True the first time the nonce is used in the tenant (or again for the same run
        and request: a decision redelivered after a crash)."""
        if self._all(
            "use_nonce", tenant_id=tenant_id, nonce=nonce, run_id=run_id,
            request_id=request_id, at=at,
        ):
            return True
        owner = self._all("nonce_owner", tenant_id=tenant_id, nonce=nonce)
        return bool(owner) and tuple(owner[0]) == (run_id, request_id)

    # -- the registry -------------------------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        self._count(
            "put_approver", tenant_id=rec.tenant_id, approver_id=rec.approver_id,
            public_key=rec.public_key, roles=list(rec.roles), created_at=rec.created_at,
            revoked_at=rec.revoked_at,
        )

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        rows = self._all("get_approver", tenant_id=tenant_id, approver_id=approver_id)
        return _approver(rows[0]) if rows else None

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        return [_approver(r) for r in self._all("list_approvers", tenant_id=tenant_id)]

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        return self._count(
            "revoke_approver", tenant_id=tenant_id, approver_id=approver_id, at=at
        ) == 1


def _signal_params(s: SignalRecord) -> dict[str, Any]:
    """Parameters of the ``send_signal`` query."""
    return {
        "tenant_id": s.tenant_id, "run_id": s.run_id, "signal_id": s.signal_id,
        "name": s.name, "payload": s.payload, "sender": s.sender,
        "created_at": s.created_at,
    }

def _approver(row: tuple[Any, ...]) -> ApproverRecord:
    return ApproverRecord(row[0], row[1], row[2], tuple(row[3]), row[4], row[5])
