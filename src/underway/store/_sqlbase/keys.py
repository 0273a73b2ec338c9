"""Data keys' reads and single statements, and the sealed rows a key rotation seals
again, as both SQL dialects run them (adding a key and erasing a subject lock
differently by dialect)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...errors import ConfigurationError
from ..records import SEALED_KINDS, DataKeyRecord, ErasureRecord, SealedRow
from .dialect import SQLBase


class SQLKeys(SQLBase):
    """The shared part of :class:`~underway.store.keys.KeyStore` and
    :class:`~underway.store.reseal.ResealStore`."""

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key with this id."""
        rows = self._all("get_data_key", tenant_id=tenant_id, key_id=key_id)
        return self._key(rows[0]) if rows else None

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The tenant's active key of ``scope``."""
        rows = self._all("active_data_key", tenant_id=tenant_id, scope=scope)
        return self._key(rows[0]) if rows else None

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """Keys of a tenant (or all), oldest first."""
        return [self._key(r) for r in self._all("list_data_keys", tenant_id=tenant_id)]

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

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The erasure log, oldest first."""
        return [erasure(r) for r in self._all("list_erasures", tenant_id=tenant_id,
                                               subject=subject)]

    # -- sealed rows ----------------------------------------------------------------------
    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """Rows of ``kind`` after ``after``, in position order."""
        params: dict[str, Any] = {
            "tenant_id": tenant_id, "first": after[0] if after else "",
            "second": after[1] if len(after) > 1 else "", "limit": limit,
        }
        if kind == "blob":
            return [SealedRow(kind, tenant_id, (r[0],), self._blob(r[1]))
                    for r in self._all("sealed_blob_rows", **params)]
        if kind == "signal":
            return [SealedRow(kind, tenant_id, (r[0], r[1]), self._blob(r[3]), name=r[2])
                    for r in self._all("sealed_signal_rows", **params)]
        if kind == "schedule":
            return [SealedRow(kind, tenant_id, (r[0],), self._blob(r[1]))
                    for r in self._all("sealed_schedule_rows", **params)]
        raise ConfigurationError(
            f"unknown kind of sealed row {kind!r}; one of {', '.join(SEALED_KINDS)}")

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Replace rows whose bytes are unchanged since they were read, in one
        transaction."""
        done = 0
        with self._transaction() as run:
            for row, new in rows:
                if row.kind not in SEALED_KINDS:
                    raise ConfigurationError(f"unknown kind of sealed row {row.kind!r}")
                done += run(
                    f"reseal_{row.kind}", tenant_id=row.tenant_id, first=row.position[0],
                    second=row.position[1] if len(row.position) > 1 else "",
                    old=row.data, new=new,
                ).rowcount
        return done

    def _key(self, row: Any) -> DataKeyRecord:
        return DataKeyRecord(row[0], row[1], self._blob(row[2]), row[3], float(row[4]),
                             row[5], row[6])


def erasure(row: Any) -> ErasureRecord:
    """A row of the erasure log as a record."""
    return ErasureRecord(str(row[0]), str(row[1]), float(row[2]), str(row[3]), str(row[4]),
                         int(row[5]), int(row[6]), int(row[7]), str(row[8]), int(row[9]))
