"""Encryption's data keys and sealed rows on a :class:`~underway.store.regional.RegionalStore`:
each tenant's data keys live in its region's database, beside what they seal; a listing of
every tenant's keys is the union of the regions'."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..base import Store
from ..records import DataKeyRecord, ErasureRecord, SealedRow


class RegionalKeys:
    """The :class:`~underway.store.keys.KeyStore` and
    :class:`~underway.store.reseal.ResealStore` of a regional store, routed by tenant."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

    def add_data_key(self, key: DataKeyRecord, *, replace: bool) -> DataKeyRecord:
        """Make the key active in its tenant's region."""
        return self._of(key.tenant_id).add_data_key(key, replace=replace)

    def get_data_key(self, tenant_id: str, key_id: str) -> DataKeyRecord | None:
        """The tenant's key, from its region."""
        return self._of(tenant_id).get_data_key(tenant_id, key_id)

    def active_data_key(self, tenant_id: str, scope: str = "") -> DataKeyRecord | None:
        """The tenant's active key, from its region."""
        return self._of(tenant_id).active_data_key(tenant_id, scope)

    def list_data_keys(self, tenant_id: str | None = None) -> list[DataKeyRecord]:
        """The tenant's keys (from its region), or every region's, oldest first."""
        if tenant_id is not None:
            return self._of(tenant_id).list_data_keys(tenant_id)
        return sorted((k for s in self._all() for k in s.list_data_keys()),
                      key=lambda k: (k.created_at, k.tenant_id, k.key_id))

    def rewrap_data_key(
        self, tenant_id: str, key_id: str, *, wrapped: bytes, kek_id: str,
        expected_kek_id: str,
    ) -> bool:
        """Re-wrap the key in its tenant's region."""
        return self._of(tenant_id).rewrap_data_key(
            tenant_id, key_id, wrapped=wrapped, kek_id=kek_id, expected_kek_id=expected_kek_id)

    def destroy_data_key(self, tenant_id: str, key_id: str) -> bool:
        """Destroy the key in its tenant's region."""
        return self._of(tenant_id).destroy_data_key(tenant_id, key_id)

    def erase_subject(self, rec: ErasureRecord) -> ErasureRecord:
        """Erase the subject in its tenant's region."""
        return self._of(rec.tenant_id).erase_subject(rec)

    def list_erasures(
        self, tenant_id: str | None = None, *, subject: str | None = None
    ) -> list[ErasureRecord]:
        """The tenant's erasure log (from its region), or every region's, oldest first."""
        if tenant_id is not None:
            return self._of(tenant_id).list_erasures(tenant_id, subject=subject)
        return sorted((e for s in self._all() for e in s.list_erasures(subject=subject)),
                      key=lambda e: (e.erased_at, e.tenant_id, e.seq))

    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """Sealed rows, from the tenant's region."""
        return self._of(tenant_id).sealed_rows(tenant_id, kind, after=after, limit=limit)

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Replace rows in their tenants' regions (one transaction per region)."""
        by_tenant: dict[str, list[tuple[SealedRow, bytes]]] = {}
        for row, new in rows:
            by_tenant.setdefault(row.tenant_id, []).append((row, new))
        return sum(self._of(t).replace_sealed(part) for t, part in by_tenant.items())
