"""The API keys role: the keys ``underway serve`` accepts, each bound to a tenant and a role,
and the secrets that sign each tenant's intake webhooks."""

from __future__ import annotations

from typing import Protocol

from .records import ApiKeyRecord, IntakeSecretRecord

__all__ = ["ApiKeyStore"]


class ApiKeyStore(Protocol):
    """Issues, finds, lists and revokes API keys; keeps webhook secrets per source."""

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a new key; :class:`~underway.errors.ConflictError` when its id is taken
        (ids are random: a clash means the caller reused one)."""
        ...

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id, revoked or not, whatever its tenant (a token names its
        key id; the key names its tenant)."""
        ...

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of ``tenant_id`` (every tenant when None), oldest first, revoked ones
        included."""
        ...

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke the tenant's key as of ``at``.

        Args:
            tenant_id: The key's tenant.
            key_id: The key.
            at: When it is revoked.

        Returns:
            False when the tenant has no such key or it was already revoked (the first
            revocation's time stands).
        """
        ...

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set the secret of a tenant's webhook source, replacing any earlier one."""
        ...

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """The secret of the tenant's webhook source, if one is set."""
        ...

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """A tenant's webhook sources by name."""
        ...

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a source's secret (its deliveries are refused from then on); False when
        there was none."""
        ...
