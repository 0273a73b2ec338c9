"""The live streams of a :class:`~underway.store.regional.RegionalStore`, each run's in its
tenant's region."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..base import Store
from ..streams import NewDelta


class RegionalStreams:
    """The live stream role of a regional store."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

    def append_stream(self, tenant_id: str, run_id: str, fence: int,
                      deltas: list[NewDelta]) -> bool:
        """Write the deltas in the tenant's region."""
        return self._of(tenant_id).append_stream(tenant_id, run_id, fence, deltas)

    def stream_attempt(self, tenant_id: str, run_id: str, key: str) -> int:
        """The last attempt that streamed call ``key``, from the tenant's region."""
        return self._of(tenant_id).stream_attempt(tenant_id, run_id, key)

    def read_stream(self, tenant_id: str, run_id: str, *, after: int,
                    limit: int) -> list[tuple[int, NewDelta]]:
        """The run's deltas after ``after``, from the tenant's region."""
        return self._of(tenant_id).read_stream(tenant_id, run_id, after=after, limit=limit)

    def drop_stream(self, tenant_id: str, run_id: str, *, keep: str | None) -> int:
        """Delete the run's deltas but those of ``keep``, in the tenant's region."""
        return self._of(tenant_id).drop_stream(tenant_id, run_id, keep=keep)

    def prune_streams(self, *, before: float) -> int:
        """Delete old deltas of runs no worker holds, in every region."""
        return sum(store.prune_streams(before=before) for store in self._all())
