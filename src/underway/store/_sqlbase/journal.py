"""The journal's and the run index's reads, and dropping checkpoints, as both SQL
dialects run them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ... import faults
from ..._chunked import LargeBlob
from ..journal import BLOB_BATCH, CHAIN_LIMIT, EVENT_PAGE, RUN_BATCH
from ..records import CheckpointTail, RunRecord, StoredEvent, StoredLabel
from .dialect import SQLBase

_FOREVER = float("inf")
"""The bound of a listing's time range that was not asked for: every time is within it."""
_LISTINGS = {(False, False): "list_runs", (True, False): "list_runs_by_status",
             (False, True): "list_runs_by_flow", (True, True): "list_runs_by_flow_status"}
"""The listing query for (a status asked, a flow asked)."""
_FOLD_AT = 1024
"""Count rows beyond twice those left by the last fold that make a scrape fold them."""


class SQLJournal(SQLBase):
    """The shared part of :class:`~underway.store.journal.JournalStore` and
    :class:`~underway.store.runs.RunStore`."""

    _counts_kept = 0
    """The count rows the last fold left (PostgreSQL keeps one a connection a key)."""

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """Checkpoints with their tails, :data:`~underway.store.journal.RUN_BATCH` runs a
        query."""
        found: dict[str, CheckpointTail] = {}
        for i in range(0, len(run_ids), RUN_BATCH):
            rows = self._all("checkpoints_with_tails", tenant_id=tenant_id,
                             runs=self._array(run_ids[i:i + RUN_BATCH]))
            for r in rows:
                if r[0] not in found:
                    found[r[0]] = CheckpointTail(int(r[1]), self._blob(r[2]), [])
                found[r[0]].tail.append(StoredEvent(r[3], r[4], self._blob(r[5]), r[6]))
        return found

    def checkpoint_before(
        self, tenant_id: str, run_id: str, seq: int
    ) -> CheckpointTail | None:
        """The newest checkpoint before ``seq``, with the events through ``seq``: one
        statement."""
        rows = self._all("checkpoint_before", tenant_id=tenant_id, run_id=run_id, seq=seq)
        if not rows:
            return None
        tail = [StoredEvent(r[2], r[3], self._blob(r[4]), r[5]) for r in rows]
        return CheckpointTail(int(rows[0][0]), self._blob(rows[0][1]), tail)

    def kept_checkpoints(self, tenant_id: str, run_id: str) -> list[tuple[int, bytes]]:
        """The checkpoints a newer one replaced, oldest first."""
        return [(int(r[0]), self._blob(r[1]))
                for r in self._all("kept_checkpoints", tenant_id=tenant_id, run_id=run_id)]

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``, read :data:`EVENT_PAGE` at a time (a page keeps
        PostgreSQL's plan on the primary key however long the table's other journals)."""
        found: list[StoredEvent] = []
        while True:
            rows = self._all("load_events", tenant_id=tenant_id, run_id=run_id,
                             after_seq=after_seq, page=EVENT_PAGE)
            found += [StoredEvent(r[0], r[1], self._blob(r[2]), r[3]) for r in rows]
            if len(rows) < EVENT_PAGE:
                return found
            after_seq = found[-1].seq

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """Events of some types of many runs, in queries of
        :data:`~underway.store.journal.RUN_BATCH` runs.
        """
        found: dict[str, list[StoredEvent]] = {}
        kinds = self._array(types)
        for i in range(0, len(run_ids), RUN_BATCH):
            rows = self._all("events_by_type", tenant_id=tenant_id, types=kinds,
                             runs=self._array(run_ids[i:i + RUN_BATCH]))
            for r in rows:
                found.setdefault(r[0], []).append(
                    StoredEvent(r[1], r[2], self._blob(r[3]), r[4]))
        return found

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint."""
        rows = self._all("load_checkpoint", tenant_id=tenant_id, run_id=run_id)
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints of a run or a whole tenant."""
        if run_id is None:
            return self._count("delete_checkpoints_of_tenant", tenant_id=tenant_id)
        return self._count("delete_checkpoints_of_run", tenant_id=tenant_id, run_id=run_id)

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key, :data:`~underway.store.journal.BLOB_BATCH` keys a query,
        all on one connection."""
        found: dict[str, bytes] = {}
        if not keys:
            return found
        with self._reads() as read:
            for i in range(0, len(keys), BLOB_BATCH):
                rows = read("get_blobs", tenant_id=tenant_id,
                            keys=self._array(keys[i:i + BLOB_BATCH]))
                found.update((r[0], bytes(r[1])) for r in rows)
        return found

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """The blob and the blobs it links to, in one recursive query."""
        rows = self._all("get_blob_chain", tenant_id=tenant_id, key=key, limit=limit)
        return {r[0]: bytes(r[1]) for r in rows}

    def write_blob_chunks(self, tenant_id: str, key: str, chunks: Iterable[bytes]) -> None:
        """Write a chunked blob's chunks, each in a transaction of its own, so that other
        writers' commits go between them.

        A chunk's commit does not wait for the disk. The commit of the event that refers
        to the blob does: the database's log is written in order, so syncing it for that
        commit syncs the chunks before it. A crash before then loses chunks nothing
        refers to.

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            chunks: The stored bytes of each chunk, in order.
        """
        for idx, data in enumerate(chunks):
            self._put_chunk({"tenant_id": tenant_id, "key": key, "idx": idx, "data": data})
            faults.point("blob.after_chunk")

    def _put_chunk(self, params: dict[str, Any]) -> None:
        """Write one chunk in a transaction of its own that does not wait for the disk."""
        self._count("put_blob_chunk", **params)

    def read_blob_chunk(self, tenant_id: str, key: str, idx: int) -> bytes | None:
        """Chunk ``idx`` of a chunked blob (None: not stored).

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            idx: The chunk's index (from 0).
        """
        rows = self._all("get_blob_chunk", tenant_id=tenant_id, key=key, idx=idx)
        return self._blob(rows[0][0]) if rows else None

    def _write_large(self, tenant_id: str, blobs: Mapping[str, bytes]) -> None:
        """Write the chunks of the chunked blobs in ``blobs`` not written yet (before the
        transaction that writes their rows)."""
        for blob in blobs.values():
            if isinstance(blob, LargeBlob) and not blob.written:
                self.write_blob_chunks(tenant_id, blob.key, blob.chunks())
                blob.written = True

    # -- the run index ------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        rows = self._all("get_run", tenant_id=tenant_id, run_id=run_id)
        return self._run(rows[0]) if rows else None

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
        updated_since: float | None = None, updated_until: float | None = None,
        search: str | None = None, labels: Mapping[str, str] | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        # A label filter reads the label index first: its own query. Else a status, a flow
        # or both pick the query whose index holds them in the listing's order.
        name = "list_runs_labelled" if labels else _LISTINGS[status is not None,
                                                             flow is not None]
        rows = self._all(
            name, tenant_id=tenant_id, status=status, flow=flow,
            since=-_FOREVER if since is None else since,
            until=_FOREVER if until is None else until,
            after_at=after[0] if after else _FOREVER,
            after_id=after[1] if after else "", prefix=id_prefix, limit=limit,
            updated_since=updated_since, updated_until=updated_until, search=search,
            label_keys=self._array(labels) if labels else None,
            label_values=self._array(labels.values()) if labels else None,
        )
        return [self._run(r) for r in rows]

    def run_labels(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, tuple[StoredLabel, ...]]:
        """The labels of these runs, by run id."""
        found: dict[str, list[StoredLabel]] = {}
        if run_ids:
            rows = self._all("run_labels", tenant_id=tenant_id,
                             run_ids=self._array(run_ids))
            for r in rows:
                found.setdefault(r[0], []).append(
                    StoredLabel(key=r[1], value=r[2], kind=r[3], sensitive=bool(r[4])))
        return {k: tuple(v) for k, v in found.items()}

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about a subject, oldest first."""
        rows = self._all("runs_of_subject", tenant_id=tenant_id, subject=subject, limit=limit)
        return [self._run(r) for r in rows]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return [r[0] for r in self._all("tenants")]

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count) of the runs: a sum of the counts the runs' triggers
        keep (migration 0027), whose cost does not grow with the runs table."""
        rows = self._all("run_counts")
        summed = sum(int(r[3]) for r in rows)
        if summed > 2 * self._counts_kept + _FOLD_AT:
            self._counts_kept = self._fold_counts()
        return [(r[0], r[1], int(r[2])) for r in rows]

    def _fold_counts(self) -> int:
        """Fold the count rows of database connections that are gone into one row a key;
        the rows left."""
        with self._transaction() as run:
            run("run_counts_fold")
            run("run_counts_drop_zeros")
        with self._reads() as read:
            return sum(int(r[3]) for r in read("run_counts"))

    def request_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, kind, count) of the runs that wait for a person."""
        return [(r[0], r[1], int(r[2])) for r in self._all("request_counts")]

    def status_counts(
        self, tenant_id: str, statuses: Sequence[str], *, cap: int
    ) -> dict[str, int]:
        """The tenant's runs by status, each counted up to ``cap``."""
        rows = self._all("status_counts", tenant_id=tenant_id,
                         statuses=self._array(statuses), cap=cap)
        found = {r[0]: int(r[1]) for r in rows}
        return {s: found.get(s, 0) for s in statuses}

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, status, count) of the runs created in a window."""
        rows = self._all("runs_created", tenant_id=tenant_id, since=since, until=until,
                         width=width)
        return [(int(r[0]), r[1], int(r[2])) for r in rows]

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs whose journals may hold events of a window."""
        rows = self._all("runs_written", tenant_id=tenant_id, since=since, until=until)
        return [r[0] for r in rows]
