"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import ConflictError
from ..records import AccessRecord, ApiKeyRecord, IntakeSecretRecord
from .connection import _Q, Connection


class Access(Connection):
    """:class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore` on PostgreSQL."""

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a new key."""
        params = {
            "key_id": rec.key_id, "tenant_id": rec.tenant_id, "role": rec.role,
            "name": rec.name, "token_hash": rec.token_hash, "created_at": rec.created_at,
            "revoked_at": rec.revoked_at,
        }
        with self._pool.connection() as conn:
            inserted = conn.execute(_Q["insert_api_key"], params).rowcount
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

    def log_access(self, records: Sequence[AccessRecord]) -> None:
        """Append entries in one transaction."""
        if not records:
            return
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(_Q["log_access"], [
                {"tenant_id": r.tenant_id, "at": r.at, "key_id": r.key_id,
                 "key_name": r.key_name, "run_id": r.run_id, "endpoint": r.endpoint}
                for r in records
            ])

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        return [AccessRecord(*r) for r in self._all(
            "list_access", tenant_id=tenant_id, run_id=run_id, key_id=key_id, since=since,
            until=until, before=before, limit=limit,
        )]
