"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._sqlbase.access import SQLAccess
from ..access import genesis, link
from ..records import AccessHead, AccessRecord
from ._connection import _Q, Connection


class Access(SQLAccess, Connection):
    """:class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore` on PostgreSQL."""

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
