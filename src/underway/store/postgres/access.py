"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ...errors import ConflictError
from ..access import genesis, link
from ..records import AccessHead, AccessRecord, ApiKeyRecord, IntakeSecretRecord
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

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append entries in one transaction, each linked to the end of its tenant's chain
        while holding the lock on the chain's head (tenants locked in name order)."""
        if not records:
            return []
        stored = []
        with self._pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            heads: dict[str, AccessHead] = {}
            for tenant in sorted({r.tenant_id for r in records}):
                cur.execute(_Q["open_access_head"],
                            {"tenant_id": tenant, "genesis": genesis(tenant)})
                cur.execute(_Q["lock_access_head"], {"tenant_id": tenant})
                row = cur.fetchone()
                assert row is not None
                heads[tenant] = AccessHead(*row)
            for rec in records:
                head = heads[rec.tenant_id]
                linked = link(rec, head.hash)
                cur.execute(_Q["log_access"], {
                    "tenant_id": linked.tenant_id, "at": linked.at, "key_id": linked.key_id,
                    "key_name": linked.key_name, "run_id": linked.run_id,
                    "endpoint": linked.endpoint, "purpose": linked.purpose,
                    "revealed": linked.revealed, "prev_hash": linked.prev_hash,
                    "hash": linked.hash,
                })
                row = cur.fetchone()
                assert row is not None
                linked = dataclasses.replace(linked, seq=int(row[0]))
                heads[rec.tenant_id] = AccessHead(rec.tenant_id, linked.seq, linked.hash,
                                                  head.entries + 1)
                stored.append(linked)
            for head in heads.values():
                cur.execute(_Q["set_access_head"], {
                    "tenant_id": head.tenant_id, "seq": head.seq, "hash": head.hash,
                    "entries": head.entries,
                })
        return stored

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100, who: str | None = None, purpose: str | None = None,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        return [AccessRecord(*r) for r in self._all(
            "list_access", tenant_id=tenant_id, run_id=run_id, key_id=key_id, since=since,
            until=until, before=before, limit=limit, who=who, purpose=purpose,
        )]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """A tenant's entries in chain order."""
        return [AccessRecord(*r) for r in self._all(
            "access_chain", tenant_id=tenant_id, after=after, limit=limit)]

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain."""
        rows = self._all("access_head", tenant_id=tenant_id)
        return AccessHead(*rows[0]) if rows else None
