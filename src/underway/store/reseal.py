"""The reseal role: the stored payloads a key rotation seals again under a tenant's new data
key — blobs, unconsumed signals and schedules' input — read in batches in a stable order and
replaced only where nobody changed them meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .records import SealedRow

__all__ = ["ResealStore"]


class ResealStore(Protocol):
    """Reads and replaces the sealed payloads of one kind of row at a time."""

    def sealed_rows(
        self, tenant_id: str, kind: str, *, after: tuple[str, ...], limit: int
    ) -> list[SealedRow]:
        """The tenant's rows of one kind, in ``position`` order.

        Args:
            tenant_id: The rows' tenant.
            kind: One of :data:`~underway.store.records.SEALED_KINDS`.
            after: Only rows whose ``position`` comes after it (``()``: from the first).
            limit: The most rows returned.
        """
        ...

    def replace_sealed(self, rows: Sequence[tuple[SealedRow, bytes]]) -> int:
        """Store each row's new bytes where its stored bytes are still the row's ``data``
        (a row changed or removed since it was read is left alone), in one transaction;
        return how many rows were replaced."""
        ...
