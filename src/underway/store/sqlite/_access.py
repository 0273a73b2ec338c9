"""API keys, intake webhook secrets and the append-only access log of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .._sqlbase.access import SQLAccess
from ..access import genesis, link
from ..records import AccessHead, AccessRecord
from ._connection import _Q, Connection


class Access(SQLAccess, Connection):
    """:class:`~underway.store.apikeys.ApiKeyStore` and
    :class:`~underway.store.access.AccessLogStore` on SQLite."""

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
                    row = c.execute(_Q["access_head"], {"tenant_id": rec.tenant_id}).fetchone()
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
