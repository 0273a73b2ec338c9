"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ..records import AccessRecord, ApiKeyRecord, IntakeSecretRecord
from .connection import _Q, Connection


class Access(Connection):
    """:class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore` on SQLite."""

    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a new key."""
        with self._tx() as c:
            cur = c.execute(_Q["insert_api_key"], (
                rec.key_id, rec.tenant_id, rec.role, rec.name, rec.token_hash, rec.created_at,
                rec.revoked_at,
            ))
            if cur.rowcount != 1:
                raise ConflictError(f"API key id {rec.key_id!r} is taken")

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key with this id."""
        rows = self._query("get_api_key", key_id)
        return ApiKeyRecord(*rows[0]) if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        return [ApiKeyRecord(*r) for r in self._query_named("list_api_keys", tenant_id=tenant_id)]

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke a key of the tenant that is not revoked yet."""
        with self._tx() as c:
            return c.execute(_Q["revoke_api_key"], (at, tenant_id, key_id)).rowcount == 1

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set a source's secret."""
        with self._tx() as c:
            c.execute(_Q["put_intake_secret"],
                      (rec.tenant_id, rec.source, rec.secret, rec.created_at))

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """A source's secret."""
        rows = self._query("get_intake_secret", tenant_id, source)
        return IntakeSecretRecord(*rows[0]) if rows else None

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """A tenant's sources by name."""
        return [IntakeSecretRecord(*r) for r in self._query("list_intake_secrets", tenant_id)]

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a source's secret."""
        with self._tx() as c:
            return c.execute(_Q["delete_intake_secret"], (tenant_id, source)).rowcount == 1

    def log_access(self, records: Sequence[AccessRecord]) -> None:
        """Append entries in one transaction."""
        if not records:
            return
        with self._tx() as c:
            c.executemany(_Q["log_access"], [
                (r.tenant_id, r.at, r.key_id, r.key_name, r.run_id, r.endpoint) for r in records
            ])

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        params: dict[str, Any] = {
            "tenant_id": tenant_id, "run_id": run_id, "key_id": key_id, "since": since,
            "until": until, "before": before, "limit": limit,
        }
        return [AccessRecord(*r) for r in self._query_named("list_access", **params)]
