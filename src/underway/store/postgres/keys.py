"""Data keys, and the sealed rows a key rotation seals again, of
:class:`~underway.store.postgres.PostgresStore`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from ...errors import ConfigurationError, ConflictError
from ..records import SEALED_KINDS, SUBJECT_SCOPE, DataKeyRecord, ErasureRecord, SealedRow
from ..subjects_erased import refuse_erased
from .connection import _Q, Connection


class Keys(Connection):
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
                    _erasure(r) for r in conn.execute(_Q["list_erasures"], subject).fetchall()])
            active = conn.execute(_Q["active_data_key"], params).fetchone()
            if active is not None and not replace:
                if conn.execute(_Q["get_data_key"], params).fetchone() is not None:
                    raise ConflictError(
                        f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
                return _key(active)
            if active is not None:
                conn.execute(_Q["retire_data_key"], params)
            row = conn.execute(_Q["insert_data_key"], params).fetchone()
            if row is None:
                raise ConflictError(
                    f"tenant {key.tenant_id!r} already has a data key {key.key_id!r}")
            return _key(row)

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key with this id."""
        rows = self._all("get_data_key", tenant_id=tenant_id, key_id=key_id)
        return _key(rows[0]) if rows else None

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The tenant's active key of ``scope``."""
        rows = self._all("active_data_key", tenant_id=tenant_id, scope=scope)
        return _key(rows[0]) if rows else None

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        return [_key(r) for r in self._all("list_data_keys", tenant_id=tenant_id)]

    def rewrap_data_key(
        self, tenant_id: str, key_id: str, *, wrapped: bytes, kek_id: str,
        expected_kek_id: str,
    ) -> bool:
        """Store the key wrapped anew if still wrapped by ``expected_kek_id``."""
        return self._count("rewrap_data_key", tenant_id=tenant_id, key_id=key_id,
                           wrapped=wrapped, kek_id=kek_id,
                           expected_kek_id=expected_kek_id) == 1

    def destroy_data_key(self, tenant_id: str, key_id: str) -> bool:
        """Erase the key's wrapped bytes."""
        return self._count("destroy_data_key", tenant_id=tenant_id, key_id=key_id) == 1

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

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The erasure log, oldest first."""
        return [_erasure(r) for r in self._all("list_erasures", tenant_id=tenant_id,
                                                subject=subject)]

    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """Rows of ``kind`` after ``after``, in position order."""
        params: dict[str, Any] = {
            "tenant_id": tenant_id, "first": after[0] if after else "",
            "second": after[1] if len(after) > 1 else "", "limit": limit,
        }
        if kind == "blob":
            return [SealedRow(kind, tenant_id, (r[0],), bytes(r[1]))
                    for r in self._all("sealed_blob_rows", **params)]
        if kind == "signal":
            return [SealedRow(kind, tenant_id, (r[0], r[1]), bytes(r[3]), name=r[2])
                    for r in self._all("sealed_signal_rows", **params)]
        if kind == "schedule":
            return [SealedRow(kind, tenant_id, (r[0],), bytes(r[1]))
                    for r in self._all("sealed_schedule_rows", **params)]
        raise ConfigurationError(
            f"unknown kind of sealed row {kind!r}; one of {', '.join(SEALED_KINDS)}")

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Replace rows whose bytes are unchanged since they were read, in one
        transaction."""
        done = 0
        with self._pool.connection() as conn, conn.transaction():
            for row, new in rows:
                name = f"reseal_{row.kind}"
                if row.kind not in SEALED_KINDS:
                    raise ConfigurationError(f"unknown kind of sealed row {row.kind!r}")
                done += conn.execute(_Q[name], {
                    "tenant_id": row.tenant_id, "first": row.position[0],
                    "second": row.position[1] if len(row.position) > 1 else "",
                    "old": row.data, "new": new,
                }).rowcount
        return done


def _key(row: tuple[Any, ...]) -> DataKeyRecord:
    return DataKeyRecord(row[0], row[1], bytes(row[2]), row[3], float(row[4]), row[5], row[6])


def _erasure(row: tuple[Any, ...]) -> ErasureRecord:
    return ErasureRecord(str(row[0]), str(row[1]), float(row[2]), str(row[3]), str(row[4]),
                         int(row[5]), int(row[6]), int(row[7]), str(row[8]), int(row[9]))
