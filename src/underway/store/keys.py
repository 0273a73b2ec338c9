"""The keys role: each tenant's data keys (DEKs) for encryption at rest, stored only wrapped
by a key-encryption key held outside the database (``underway.crypto``)."""

from __future__ import annotations

from typing import Protocol

from .records import DataKeyRecord, ErasureRecord

__all__ = ["KeyStore"]


class KeyStore(Protocol):
    """Keeps tenants' wrapped data keys: which one seals new payloads (``active``), which
    only open old ones (``retired``), which were destroyed."""

    def add_data_key(self, key: DataKeyRecord, *, replace: bool) -> DataKeyRecord:
        """Make ``key`` (state ``active``) the active key of its tenant and scope, and
        return the active key after the call.

        Without ``replace`` it is written only when the tenant has no active key of that
        scope: of processes creating a tenant's first key at once, all end up with the same
        one. With ``replace`` the key active until now becomes ``retired`` in the same
        transaction (a rotation). A ``key_id`` the tenant already has raises
        :class:`~underway.errors.ConflictError`; a key of an erased data subject's scope
        raises :class:`~underway.errors.SubjectErased`.
        """
        ...

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key with this id, whatever its state."""
        ...

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The key new payloads of the tenant (and scope) are sealed with, if any."""
        ...

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """The keys of a tenant (None: of every tenant), oldest first."""
        ...

    def rewrap_data_key(
        self, tenant_id: str, key_id: str, *, wrapped: bytes, kek_id: str,
        expected_kek_id: str,
    ) -> bool:
        """Store the key wrapped anew, only if it is still wrapped as expected and not destroyed.

        Args:
            tenant_id: The key's tenant.
            key_id: The key.
            wrapped: The key's bytes wrapped anew.
            kek_id: The key-encryption key that wrapped them.
            expected_kek_id: The key-encryption key the stored bytes must still be wrapped by.

        Returns:
            True when the key was stored.
        """
        ...

    def destroy_data_key(self, tenant_id: str, key_id: str) -> bool:
        """Erase the key's wrapped bytes for good (state ``destroyed``): whatever it sealed
        can never be opened again. False when there was no such key or it was destroyed."""
        ...

    def erase_subject(self, rec: ErasureRecord) -> ErasureRecord:
        """In one transaction: destroy every key of the subject's scope (their wrapped
        bytes gone for good) and append ``rec`` to the erasure log, its ``keys`` the
        number destroyed now and ``seq`` given. From then on no key of that scope can be
        added. Taken in turn with :meth:`add_data_key` of the scope, so a key made
        concurrently is either destroyed here or refused there."""
        ...

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The erasure log of a tenant (None: every tenant), of one subject when given,
        oldest first."""
        ...
