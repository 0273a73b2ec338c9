"""Data keys, and the sealed rows a key rotation seals again, of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses

from ...errors import ConflictError
from .._sqlbase.keys import SQLKeys, erasure
from ..records import SUBJECT_SCOPE, DataKeyRecord, ErasureRecord
from ..subjects_erased import refuse_erased
from ._connection import _Q, Connection


class Keys(SQLKeys, Connection):
    """:class:`~underway.store.keys.KeyStore` and
    :class:`~underway.store.reseal.ResealStore` on SQLite."""

    def add_data_key(self, key: DataKeyRecord, *, replace: bool) -> DataKeyRecord:
        """Make the key active (first only, or replacing the active one), under the
        write lock."""
        with self._tx() as c:
            if key.scope.startswith(SUBJECT_SCOPE):
                subject = {"tenant_id": key.tenant_id,
                           "subject": key.scope[len(SUBJECT_SCOPE):]}
                refuse_erased(key.tenant_id, [
                    erasure(r) for r in c.execute(_Q["list_erasures"], subject).fetchall()])
            ids = {"tenant_id": key.tenant_id, "key_id": key.key_id, "scope": key.scope}
            if c.execute(_Q["get_data_key"], ids).fetchone():
                raise ConflictError(
                    f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
            active = c.execute(_Q["active_data_key"], ids).fetchone()
            if active is not None:
                if not replace:
                    return self._key(active)
                c.execute(_Q["retire_data_key"], (key.tenant_id, active[1]))
            c.execute(_Q["insert_data_key"], (
                key.tenant_id, key.key_id, key.scope, key.wrapped, key.kek_id, key.created_at,
            ))
            row = c.execute(_Q["get_data_key"], ids).fetchone()
            return self._key(row)

    def erase_subject(self, rec: ErasureRecord) -> ErasureRecord:
        """Destroy the subject's keys and log the erasure, under the write lock."""
        with self._tx() as c:
            keys = c.execute(_Q["destroy_scope_keys"],
                             (rec.tenant_id, SUBJECT_SCOPE + rec.subject)).rowcount
            row = c.execute(_Q["insert_erasure"], (
                rec.tenant_id, rec.subject, rec.erased_at, rec.by, rec.reason, rec.runs,
                rec.knowledge, keys, rec.vault,
            )).fetchone()
        return dataclasses.replace(rec, keys=keys, seq=int(row[0]))
