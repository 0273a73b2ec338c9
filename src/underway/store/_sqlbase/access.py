"""API keys, intake webhook secrets and the access log's reads, as both SQL dialects
run them (appending to the access log locks differently by dialect)."""

from __future__ import annotations

from typing import Any

from ...errors import ConflictError
from ..records import AccessHead, AccessRecord, ApiKeyRecord, IntakeSecretRecord
from .dialect import SQLBase


class SQLAccess(SQLBase):
    """The shared part of :class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore`."""

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a new key."""
        inserted = self._count(
            "insert_api_key", key_id=rec.key_id, tenant_id=rec.tenant_id, role=rec.role,
            name=rec.name, token_hash=rec.token_hash, created_at=rec.created_at,
            revoked_at=rec.revoked_at,
        )
        if inserted != 1:
            raise ConflictError(f"API key id {rec.key_id!r} is taken")

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        rows = self._all("get_api_key", key_id=key_id)
        return ApiKeyRecord(*rows[0]) if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        return [ApiKeyRecord(*r) for r in self._all("list_api_keys", tenant_id=tenant_id)]

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke a key of the tenant that is not revoked yet."""
        return self._count("revoke_api_key", tenant_id=tenant_id, key_id=key_id, at=at) == 1

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set a source's secret."""
        self._count("put_intake_secret", tenant_id=rec.tenant_id, source=rec.source,
                    secret=rec.secret, created_at=rec.created_at)

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """A source's secret."""
        rows = self._all("get_intake_secret", tenant_id=tenant_id, source=source)
        return IntakeSecretRecord(*rows[0]) if rows else None

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """A tenant's sources by name."""
        return [IntakeSecretRecord(*r)
                for r in self._all("list_intake_secrets", tenant_id=tenant_id)]

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a source's secret."""
        return self._count("delete_intake_secret", tenant_id=tenant_id, source=source) == 1

    # -- the access log -------------------------------------------------------------------
    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100, who: str | None = None, purpose: str | None = None,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        return [_access(r) for r in self._all(
            "list_access", tenant_id=tenant_id, run_id=run_id, key_id=key_id, since=since,
            until=until, before=before, limit=limit, who=who, purpose=purpose,
        )]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """A tenant's entries in chain order."""
        return [_access(r) for r in self._all(
            "access_chain", tenant_id=tenant_id, after=after, limit=limit)]

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain."""
        rows = self._all("access_head", tenant_id=tenant_id)
        return AccessHead(*rows[0]) if rows else None


def _access(row: Any) -> AccessRecord:
    """An access log row as a record (SQLite keeps ``revealed`` as 0 or 1)."""
    (tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
     hash_) = row
    return AccessRecord(tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose,
                        bool(revealed), prev_hash, hash_)
