"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError
from ..access import genesis, link
from ..records import AccessHead, AccessRecord, ApiKeyRecord, IntakeSecretRecord
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

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append entries in one transaction, each linked to the end of its tenant's chain
        (``BEGIN IMMEDIATE``: one writer at a time, whatever the process)."""
        if not records:
            return []
        stored = []
        with self._tx() as c:
            heads: dict[str, AccessHead | None] = {}
            for rec in records:
                if rec.tenant_id not in heads:
                    row = c.execute(_Q["access_head"], (rec.tenant_id,)).fetchone()
                    heads[rec.tenant_id] = AccessHead(*row) if row is not None else None
                head = heads[rec.tenant_id]
                linked = link(rec, head.hash if head is not None else genesis(rec.tenant_id))
                cur = c.execute(_Q["log_access"], (
                    linked.tenant_id, linked.at, linked.key_id, linked.key_name, linked.run_id,
                    linked.endpoint, linked.purpose, int(linked.revealed), linked.prev_hash,
                    linked.hash,
                ))
                seq = int(cur.lastrowid or 0)
                linked = dataclasses.replace(linked, seq=seq)
                heads[rec.tenant_id] = AccessHead(rec.tenant_id, seq, linked.hash,
                                                  (head.entries if head else 0) + 1)
                stored.append(linked)
            for found in heads.values():
                if found is not None:
                    c.execute(_Q["put_access_head"],
                              (found.tenant_id, found.seq, found.hash, found.entries))
        return stored

    def list_access(
        self, tenant_id: str, *, run_id: str | None = None, key_id: str | None = None,
        since: float | None = None, until: float | None = None, before: int | None = None,
        limit: int = 100, who: str | None = None, purpose: str | None = None,
    ) -> list[AccessRecord]:
        """A tenant's entries, newest first."""
        params: dict[str, Any] = {
            "tenant_id": tenant_id, "run_id": run_id, "key_id": key_id, "since": since,
            "until": until, "before": before, "limit": limit, "who": who, "purpose": purpose,
        }
        return [_access(r) for r in self._query_named("list_access", **params)]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """A tenant's entries in chain order."""
        return [_access(r) for r in self._query("access_chain", tenant_id, after, limit)]

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain."""
        rows = self._query("access_head", tenant_id)
        return AccessHead(*rows[0]) if rows else None


def _access(row: Any) -> AccessRecord:
    (tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose, revealed, prev_hash,
     hash_) = row
    return AccessRecord(tenant_id, at, key_id, key_name, run_id, endpoint, seq, purpose,
                        bool(revealed), prev_hash, hash_)
