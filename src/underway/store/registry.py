"""The registry role: the approvers of each tenant and the public keys they sign with."""

from __future__ import annotations

from typing import Protocol

from .records import ApproverRecord

__all__ = ["RegistryStore"]


class RegistryStore(Protocol):
    """Registers, lists and revokes approvers."""

    def put_approver(self, rec: ApproverRecord) -> None:
        """Register an approver, or replace the one with its tenant and id (its key, roles
        and creation time; registering again lifts a revocation)."""
        ...

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id in the tenant, revoked or not."""
        ...

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id, revoked ones included."""
        ...

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver as of ``at``.

        Args:
            tenant_id: The approver's tenant.
            approver_id: The approver.
            at: When it is revoked.

        Returns:
            False when there is no such approver or it was already revoked (the first
            revocation's time stands).
        """
        ...
