"""The journal role: runs' append-only events, their checkpoints and content-addressed blobs.

Appends are atomic: events, blobs, checkpoint and (when given) the run row change in one
transaction, which commits only if the run's journal still ends at ``expected_seq`` and the
writer's lease token is still current (fencing). The journal itself is the sequence check:
the run row is a projection, written when a run changes status or is handed back, not on
every step, so a step's commit writes little more than its events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from .records import AppendBatch, CheckpointTail, ForkLink, NewRun, RunRecord, StoredEvent

__all__ = ["BLOB_BATCH", "CHAIN_LIMIT", "EVENT_PAGE", "RUN_BATCH", "AppendResult", "JournalStore"]

BLOB_BATCH = 500
"""Keys per query when many blobs are read at once (a bound on a query's ``IN`` list)."""

RUN_BATCH = 500
"""Runs per query when the events of many runs are read at once."""

EVENT_PAGE = 2000
"""Events a SQL store reads per query when it loads a run's journal."""

AppendResult = bool | Exception
"""What :meth:`JournalStore.append_many` reports for one batch: the control-pending flag
:meth:`JournalStore.append` would have returned, or the exception it would have raised."""

CHAIN_LIMIT = 10_000
"""The most blobs one :meth:`JournalStore.get_blob_chain` call follows."""


class JournalStore(Protocol):
    """Writes and reads runs' journals."""

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run with its first event, or return the existing one with the same
        idempotency key (tenant, flow, key). The boolean is True when this call created it."""
        ...

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically; raise ConflictError or FencedError and change nothing if
        the run moved past ``expected_seq`` or the lease token is stale. The batch's
        ``signals`` (to other runs of the tenant) are sent in the same transaction, as
        :meth:`~underway.store.inbox.InboxStore.send_signal` would, or not at all.

        Returns True when control signals (``underway.*``: cancel, resolve) wait in the
        run's inbox, so the engine looks at the inbox only when there is something there.
        """
        ...

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append several runs' batches, in one transaction where the database allows:
        one commit, one flush to disk, for all of them (group commit).

        Each batch is still fenced and sequence-checked on its own and is committed whole
        or not at all; one that :meth:`append` would refuse or fail is left out and the
        others commit. The result, in the order of ``batches``, is for each what
        :meth:`append` would have returned (the control-pending flag) or the exception it
        would have raised. Raises only when the transaction as a whole fails, and then no
        batch of it is known to have committed.
        """
        ...

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Create the forked run ``new`` (no idempotency key) and append ``link.event`` to
        its parent, in one transaction. Raise :class:`~underway.errors.ConflictError` and
        change nothing when the parent's journal no longer ends at ``link.expected_seq``,
        when a worker holds the parent's lease at ``link.now`` (it is being advanced), or
        when a run with the fork's id exists; :class:`~underway.errors.RunNotFound` when
        the parent has no row. The parent's row moves its head (``last_seq``,
        ``last_hash``, ``updated_at``) to the new event and keeps its status."""
        ...

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """A run's events after ``after_seq``, in order.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            after_seq: Only events with a greater ``seq`` (0: every event).
        """
        ...

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """The checkpoint of each run of ``run_ids`` that has one, with the events from its
        seq on, by run (a run without a checkpoint is absent): what loading many runs'
        states needs, read in few queries (:data:`RUN_BATCH` runs a query), each run's
        checkpoint and tail from one snapshot."""
        ...

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """The events of each run whose type is one of ``types``, in order, by run.

        A run with none is absent. These few kinds of event of many runs are read on the
        journal's primary key in few queries (:data:`RUN_BATCH` runs a query). The other events'
        payloads are not read.

        Args:
            tenant_id: The runs' tenant.
            run_ids: The runs.
            types: The event types wanted.
        """
        ...

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint (its sequence number and bytes), if any."""
        ...

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints (they are caches); return how many were removed."""
        ...

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by content hash; keys not stored are absent. Many keys are read in
        few queries (:data:`BLOB_BATCH` a query), never one query a key."""
        ...

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """The blob ``key`` and the blobs it links to, in one query.

        A blob links to the one whose key follows its first six bytes when those are
        ``{"p":"``. That is the shape of the codec's list nodes (``{"p": previous, "x": item}``).
        So a conversation stored as a chain of nodes is read at once rather than a node a query.
        A link is only a hint: whoever decodes checks every blob against its key. Sealed
        (encrypted) blobs link nowhere, and then this returns ``key`` alone.

        Args:
            tenant_id: The blobs' tenant.
            key: The first blob's content hash.
            limit: The most blobs returned.

        Returns:
            Blob bytes by content hash.
        """
        ...

    def write_blob_chunks(self, tenant_id: str, key: str, chunks: Iterable[bytes]) -> None:
        """Write the chunks of chunked blob ``key`` (:mod:`underway._chunked`), in order,
        each in a transaction of its own, consuming ``chunks`` one at a time. A chunk
        written before is replaced. The blob's row (its manifest) is written later, with
        the first event that refers to it; until then nothing refers to these chunks.

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            chunks: The stored bytes of each chunk.
        """
        ...

    def read_blob_chunk(self, tenant_id: str, key: str, idx: int) -> bytes | None:
        """The stored bytes of chunk ``idx`` of chunked blob ``key`` (None: not stored).

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            idx: The chunk's index (from 0).
        """
        ...
