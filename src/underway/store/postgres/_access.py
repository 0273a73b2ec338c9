"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._sqlbase.access import SQLAccess
from ..access import genesis, link
from ..records import AccessHead, AccessRecord
from ._connection import _Q, Connection
from ._pipelines import pipelined


class Access(SQLAccess, Connection):
    """:class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore` on PostgreSQL."""

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append entries in one transaction, each linked to the end of its tenant's chain
        while holding the lock on the chain's head (tenants locked in name order)."""
        if not records:
            return []
        with self._pool.connection() as conn, conn.transaction():
            heads: dict[str, AccessHead] = {}
            with conn.cursor() as cur:
                for tenant in sorted({r.tenant_id for r in records}):
                    cur.execute(_Q["open_access_head"],
                                {"tenant_id": tenant, "genesis": genesis(tenant)})
                    cur.execute(_Q["lock_access_head"], {"tenant_id": tenant})
                    row = cur.fetchone()
                    assert row is not None
                    heads[tenant] = AccessHead(*row)
            # Each entry's hash needs only the one before it, not its seq: the inserts go
            # out together, in one round trip, and their seqs are read after.
            linked = []
            ends = dict(heads)
            for rec in records:
                entry = link(rec, ends[rec.tenant_id].hash)
                ends[rec.tenant_id] = dataclasses.replace(ends[rec.tenant_id], hash=entry.hash)
                linked.append(entry)
            with pipelined(conn):
                inserted = [conn.execute(_Q["log_access"], {
                    "tenant_id": e.tenant_id, "at": e.at, "key_id": e.key_id,
                    "key_name": e.key_name, "run_id": e.run_id, "endpoint": e.endpoint,
                    "purpose": e.purpose, "revealed": e.revealed, "prev_hash": e.prev_hash,
                    "hash": e.hash,
                }) for e in linked]
            stored = []
            for entry, cur in zip(linked, inserted, strict=True):
                row = cur.fetchone()
                assert row is not None
                stored.append(dataclasses.replace(entry, seq=int(row[0])))
            for tenant, head in heads.items():
                mine = [e for e in stored if e.tenant_id == tenant]
                conn.execute(_Q["set_access_head"], {
                    "tenant_id": tenant, "seq": mine[-1].seq, "hash": mine[-1].hash,
                    "entries": head.entries + len(mine),
                })
        return stored
