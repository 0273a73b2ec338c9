"""The journal and the runs of a :class:`~underway.store.regional.RegionalStore`: each
tenant's runs, events, checkpoints and blobs in its region's database."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError
from ..base import Store
from ..journal import CHAIN_LIMIT, AppendResult
from ..records import (
    AppendBatch,
    CheckpointTail,
    ForkLink,
    NewRun,
    RunRecord,
    StoredEvent,
    StoredLabel,
)


class RegionalJournal:
    """The :class:`~underway.store.journal.JournalStore` and
    :class:`~underway.store.runs.RunStore` of a regional store, routed by tenant."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run in its tenant's region."""
        return self._of(new.tenant_id).create_run(new)

    def append(self, batch: AppendBatch) -> bool:
        """Append in the run's region (its signals go to runs of the same tenant)."""
        return self._of(batch.tenant_id).append(batch)

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append each region's batches together in that region's database."""
        by_region: dict[int, tuple[Store, list[int]]] = {}
        for i, batch in enumerate(batches):
            store = self._of(batch.tenant_id)
            by_region.setdefault(id(store), (store, []))[1].append(i)
        out: list[AppendResult] = [False] * len(batches)
        for store, indexes in by_region.values():
            for i, result in zip(
                indexes, store.append_many([batches[i] for i in indexes]), strict=True
            ):
                out[i] = result
        return out

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Fork a run in its tenant's region (a fork stays in its parent's tenant)."""
        if new.tenant_id != link.tenant_id:
            raise ConfigurationError(
                f"a fork stays in its parent's tenant: {new.tenant_id!r} is not "
                f"{link.tenant_id!r}")
        return self._of(link.tenant_id).fork_run(new, link)

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """Checkpoints with their tails, from the tenant's region."""
        return self._of(tenant_id).load_checkpoints(tenant_id, run_ids)

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events, from the tenant's region."""
        return self._of(tenant_id).load_events(tenant_id, run_id, after_seq)

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """Events of some types, from the tenant's region."""
        return self._of(tenant_id).events_by_type(tenant_id, run_ids, types)

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The checkpoint, from the tenant's region."""
        return self._of(tenant_id).load_checkpoint(tenant_id, run_id)

    def checkpoint_before(
        self, tenant_id: str, run_id: str, seq: int
    ) -> CheckpointTail | None:
        """The newest checkpoint before ``seq``, from the tenant's region."""
        return self._of(tenant_id).checkpoint_before(tenant_id, run_id, seq)

    def kept_checkpoints(self, tenant_id: str, run_id: str) -> list[tuple[int, bytes]]:
        """The kept checkpoints, from the tenant's region."""
        return self._of(tenant_id).kept_checkpoints(tenant_id, run_id)

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints in the tenant's region."""
        return self._of(tenant_id).delete_checkpoints(tenant_id, run_id)

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blobs, from the tenant's region."""
        return self._of(tenant_id).get_blobs(tenant_id, keys)

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """A chain of blobs, from the tenant's region."""
        return self._of(tenant_id).get_blob_chain(tenant_id, key, limit=limit)

    def write_blob_chunks(self, tenant_id: str, key: str, chunks: Iterable[bytes]) -> None:
        """A chunked blob's chunks, written in the tenant's region.

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            chunks: The stored bytes of each chunk, in order.
        """
        self._of(tenant_id).write_blob_chunks(tenant_id, key, chunks)

    def read_blob_chunk(self, tenant_id: str, key: str, idx: int) -> bytes | None:
        """A chunk of a chunked blob, from the tenant's region.

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            idx: The chunk's index (from 0).
        """
        return self._of(tenant_id).read_blob_chunk(tenant_id, key, idx)

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, from the tenant's region."""
        return self._of(tenant_id).get_run(tenant_id, run_id)

    def list_runs(self, tenant_id: str, **filters: Any) -> list[RunRecord]:
        """The tenant's runs, from its region."""
        return self._of(tenant_id).list_runs(tenant_id, **filters)

    def run_labels(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, tuple[StoredLabel, ...]]:
        """The runs' labels, from the tenant's region."""
        return self._of(tenant_id).run_labels(tenant_id, run_ids)

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The runs about a subject, from the tenant's region."""
        return self._of(tenant_id).runs_of_subject(tenant_id, subject, limit=limit)

    def tenants(self) -> list[str]:
        """Tenants with runs, in every region."""
        return sorted({t for s in self._all() for t in s.tenants()})

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count), of every region."""
        return sorted(c for s in self._all() for c in s.run_counts())

    def request_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, kind, count), of every region."""
        return sorted(c for s in self._all() for c in s.request_counts())

    def status_counts(
        self, tenant_id: str, statuses: Sequence[str], *, cap: int
    ) -> dict[str, int]:
        """The tenant's runs by status, from its region."""
        return self._of(tenant_id).status_counts(tenant_id, statuses, cap=cap)

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """Runs created per bucket, from the tenant's region."""
        return self._of(tenant_id).runs_created(tenant_id, since=since, until=until,
                                                width=width)

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs written in a window, from the tenant's region."""
        return self._of(tenant_id).runs_written(tenant_id, since=since, until=until)

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events: the tenant's region's, or every region's."""
        if tenant_id is not None:
            return self._of(tenant_id).journaled_runs(tenant_id)
        return sorted(r for s in self._all() for r in s.journaled_runs())

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """Heads of journals: the tenant's region's, or every region's."""
        if tenant_id is not None:
            return self._of(tenant_id).journal_heads(tenant_id)
        return sorted(h for s in self._all() for h in s.journal_heads())
