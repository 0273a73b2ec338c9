"""The inbox's reads and the registry of approvers, as both SQL dialects run them
(sending a signal and using a nonce differ by dialect)."""

from __future__ import annotations

from typing import Any

from ...control import RESERVED_PREFIX
from ..records import ApproverRecord, SignalRecord
from .dialect import SQLBase


class SQLInbox(SQLBase):
    """The shared part of :class:`~underway.store.inbox.InboxStore` and
    :class:`~underway.store.registry.RegistryStore`."""

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._all("pending_signals", tenant_id=tenant_id, run_id=run_id)
        ]

    def actionable_signals(
        self, tenant_id: str, run_id: str, *, waiting: str | None
    ) -> list[SignalRecord]:
        """Unconsumed control signals and the oldest one named ``waiting``, oldest first."""
        if waiting is not None and waiting.startswith(RESERVED_PREFIX):
            waiting = None  # a control name: read with the other control signals
        return [
            SignalRecord(r[0], r[1], r[2], r[3], bytes(r[4]), r[5], r[6])
            for r in self._all("actionable_signals", tenant_id=tenant_id, run_id=run_id,
                               waiting=waiting)
        ]

    # -- the registry -------------------------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        self._count(
            "put_approver", tenant_id=rec.tenant_id, approver_id=rec.approver_id,
            public_key=rec.public_key, roles=self._array(rec.roles),
            created_at=rec.created_at, revoked_at=rec.revoked_at,
        )

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        rows = self._all("get_approver", tenant_id=tenant_id, approver_id=approver_id)
        return self._approver(rows[0]) if rows else None

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        return [self._approver(r) for r in self._all("list_approvers", tenant_id=tenant_id)]

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        return self._count(
            "revoke_approver", tenant_id=tenant_id, approver_id=approver_id, at=at
        ) == 1

    def _approver(self, row: Any) -> ApproverRecord:
        return ApproverRecord(
            row[0], row[1], row[2], tuple(self._from_array(row[3])), row[4], row[5]
        )
