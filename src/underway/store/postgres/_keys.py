"""Data keys, and the sealed rows a key rotation seals again, of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from typing import Any

from ...errors import ConflictError
from .._sqlbase.keys import SQLKeys, erasure
from ..records import SUBJECT_SCOPE, DataKeyRecord, ErasureRecord
from ..subjects_erased import refuse_erased
from ._connection import _Q, Connection


class Keys(SQLKeys, Connection):
    """:class:`~underway.store.keys.KeyStore` and
    :class:`~underway.store.reseal.ResealStore` on PostgreSQL."""

    def add_data_key(self, key: DataKeyRecord, *, replace: bool) -> DataKeyRecord:
        """Make the key active (first only, or replacing the active one); changes to a
        tenant's keys take turns on an advisory lock."""
        params = {
            "tenant_id": key.tenant_id, "key_id": key.key_id, "scope": key.scope,
            "wrapped": key.wrapped, "kek_id": key.kek_id, "created_at": key.created_at,
        }
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_Q["lock_data_keys"], params)
            if key.scope.startswith(SUBJECT_SCOPE):
                subject = {"tenant_id": key.tenant_id,
                           "subject": key.scope[len(SUBJECT_SCOPE):]}
                refuse_erased(key.tenant_id, [
                    erasure(r) for r in conn.execute(_Q["list_erasures"], subject).fetchall()])
            active = conn.execute(_Q["active_data_key"], params).fetchone()
            if active is not None and not replace:
                if conn.execute(_Q["get_data_key"], params).fetchone() is not None:
                    raise ConflictError(
                        f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
                return self._key(active)
            if active is not None:
                conn.execute(_Q["retire_data_key"], params)
            row = conn.execute(_Q["insert_data_key"], params).fetchone()
            if row is None:
                raise ConflictError(
                    f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
            return self._key(row)

    def erase_subject(self, rec: ErasureRecord) -> ErasureRecord:
        """Destroy the subject's keys and log the erasure, under the scope's lock."""
        params: dict[str, Any] = {
            "tenant_id": rec.tenant_id, "scope": SUBJECT_SCOPE + rec.subject,
            "subject": rec.subject, "erased_at": rec.erased_at, "by": rec.by,
            "reason": rec.reason, "runs": rec.runs, "knowledge": rec.knowledge,
            "vault": rec.vault,
        }
        with self._pool.connection() as conn, conn.transaction():
            conn.execute(_Q["lock_data_keys"], params)
            params["keys"] = conn.execute(_Q["destroy_scope_keys"], params).rowcount
            row = conn.execute(_Q["insert_erasure"], params).fetchone()
        assert row is not None
        return dataclasses.replace(rec, keys=params["keys"], seq=int(row[0]))
