"""Data keys, and the sealed rows a key rotation seals again, of
:class:`~underway.store.sqlite.SQLiteStore`."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigurationError, ConflictError
from ..records import SEALED_KINDS, SUBJECT_SCOPE, DataKeyRecord, ErasureRecord, SealedRow
from ..subjects_erased import refuse_erased
from .connection import _Q, Connection
from .journal import _bytes


class Keys(Connection):
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
                    _erasure(r) for r in c.execute(_Q["list_erasures"], subject).fetchall()])
            if c.execute(_Q["get_data_key"], (key.tenant_id, key.key_id)).fetchone():
                raise ConflictError(
                    f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
            active = c.execute(_Q["active_data_key"], (key.tenant_id, key.scope)).fetchone()
            if active is not None:
                if not replace:
                    return _key(active)
                c.execute(_Q["retire_data_key"], (key.tenant_id, active[1]))
            c.execute(_Q["insert_data_key"], (
                key.tenant_id, key.key_id, key.scope, key.wrapped, key.kek_id, key.created_at,
            ))
            row = c.execute(_Q["get_data_key"], (key.tenant_id, key.key_id)).fetchone()
            return _key(row)

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key with this id."""
        rows = self._query("get_data_key", tenant_id, key_id)
        return _key(rows[0]) if rows else None

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The tenant's active key of ``scope``."""
        rows = self._query("active_data_key", tenant_id, scope)
        return _key(rows[0]) if rows else None

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        return [_key(r) for r in self._query_named("list_data_keys", tenant_id=tenant_id)]

    def rewrap_data_key(
        self, tenant_id: str, key_id: str, *, wrapped: bytes, kek_id: str,
        expected_kek_id: str,
    ) -> bool:
        """Store the key wrapped anew if still wrapped by ``expected_kek_id``."""
        with self._tx() as c:
            cur = c.execute(_Q["rewrap_data_key"],
                            (wrapped, kek_id, tenant_id, key_id, expected_kek_id))
            return cur.rowcount == 1

    def destroy_data_key(self, tenant_id: str, key_id: str) -> bool:
        """Erase the key's wrapped bytes."""
        with self._tx() as c:
            return c.execute(_Q["destroy_data_key"], (tenant_id, key_id)).rowcount == 1

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

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The erasure log, oldest first."""
        return [_erasure(r) for r in self._query_named("list_erasures", tenant_id=tenant_id,
                                                        subject=subject)]

    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """Rows of ``kind`` after ``after``, in position order."""
        first = after[0] if after else ""
        if kind == "blob":
            return [SealedRow(kind, tenant_id, (r[0],), _bytes(r[1])) for r in
                    self._query("sealed_blob_rows", tenant_id, first, limit)]
        if kind == "signal":
            second = after[1] if len(after) > 1 else ""
            return [SealedRow(kind, tenant_id, (r[0], r[1]), _bytes(r[3]), name=r[2]) for r in
                    self._query("sealed_signal_rows", tenant_id, first, second, limit)]
        if kind == "schedule":
            return [SealedRow(kind, tenant_id, (r[0],), _bytes(r[1])) for r in
                    self._query("sealed_schedule_rows", tenant_id, first, limit)]
        raise ConfigurationError(
            f"unknown kind of sealed row {kind!r}; one of {', '.join(SEALED_KINDS)}")

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Replace rows whose bytes are unchanged since they were read, in one
        transaction."""
        done = 0
        with self._tx() as c:
            for row, new in rows:
                done += _replace(c, row, new)
        return done


def _replace(c: sqlite3.Connection, row: SealedRow, new: bytes) -> int:
    t, p = row.tenant_id, row.position
    params: tuple[Any, ...]
    if row.kind == "blob":
        name, params = "reseal_blob", (new, t, p[0], row.data)
    elif row.kind == "signal":
        name, params = "reseal_signal", (new, t, p[0], p[1], row.data)
    elif row.kind == "schedule":
        name, params = "reseal_schedule", (new, t, p[0], row.data)
    else:
        raise ConfigurationError(f"unknown kind of sealed row {row.kind!r}")
    return c.execute(_Q[name], params).rowcount


def _key(row: sqlite3.Row | tuple[Any, ...]) -> DataKeyRecord:
    return DataKeyRecord(row[0], row[1], _bytes(row[2]), row[3], float(row[4]), row[5], row[6])


def _erasure(row: sqlite3.Row | tuple[Any, ...]) -> ErasureRecord:
    return ErasureRecord(str(row[0]), str(row[1]), float(row[2]), str(row[3]), str(row[4]),
                         int(row[5]), int(row[6]), int(row[7]), str(row[8]), int(row[9]))
