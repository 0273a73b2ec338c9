"""An activation: a leased run being advanced, its folded state and the events not yet
committed, and how a commit turns them into one fenced append."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .. import events as ev
from .. import faults
from .._chunked import LargeBlob
from ..codec import run_error_where
from ..guard.budgets import Usage
from ..journal.projection import expected_update, labels_set
from ..journal.state import Recorded, RunState, apply
from ..redaction import Hidden
from ..store.base import AppendBatch, CoreStore, Lease, RunRecord
from ._outbox import outbox
from ._stops import Unencodable

if TYPE_CHECKING:
    from ._services import StepServices

_T = TypeVar("_T")

_DECLARING = frozenset(
    cls for cls in ev.EVENT_TYPES.values()
    if "sensitive_fields" in cls.model_fields or "secret_fields" in cls.model_fields
)
"""The event types that can declare hidden fields: only theirs are read for declarations
(asking any other event for the fields costs a failed attribute lookup per event)."""


@dataclass
class Activation:
    """A leased run being advanced: its folded state and the events not yet committed."""

    services: StepServices
    """What the run's execution uses of the engine."""
    lease: Lease
    state: RunState
    last_hash: str
    checkpoint_seq: int
    pending: list[tuple[int, float, ev.RunEvent]] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)
    control_pending: bool = False
    due_at: float | None = None
    """The run row's ``next_wake_at`` when claimed (in the past: the run was due)."""
    row_status: str = "ready"
    """The status the run row shows; the row is rewritten only when this must change."""
    queue: str = "default"
    """The queue the run is on (its child runs start on it unless told otherwise)."""
    row: RunRecord | None = None
    """The run row as claimed: an activation that leaves with nothing to commit heals it
    from the journal when the two disagree (:mod:`._rows`)."""
    lost: bool = False
    """Set by the heartbeat when the lease was lost to another worker."""
    after_commit: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Work that must wait until the buffered events are durable (notifications)."""
    in_flight: dict[str, tuple[int, Usage]] = field(default_factory=dict)
    _commit_turn: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    """Calls of this activation the run's budget admitted and whose outcome is not yet
    folded (key: call index, the most it may spend): calls a step runs at once count
    against the run's budget before any of them ends."""
    store_error: Exception | None = None
    """A database failure met inside a step: the activation ends and the run is handed
    back (never dead-lettered: the run did nothing wrong), even if step code caught it."""

    async def store(self, fn: Callable[..., _T], *args: Any) -> _T:
        """A store call made while a step runs (remembered if it fails)."""
        return await self._remembered(self.services.io(fn, *args))

    async def _append(self, batch: AppendBatch) -> bool:
        """Append ``batch``: with the other activations' batches when the engine commits
        in groups, else on its own (remembered if it fails, like :meth:`store`)."""
        committer = self.services.committer
        if committer is None:
            return await self.store(self.services.store.append, batch)
        return await self._remembered(committer.append(batch))

    async def _remembered(self, pending: Awaitable[_T]) -> _T:
        try:
            return await pending
        except Exception as exc:
            self.store_error = exc
            raise

    def buffer(self, event: ev.RunEvent) -> None:
        at = self.services.clock.now()
        seq = self.state.seq + 1
        apply(self.state, Recorded(seq, at, event))
        self.pending.append((seq, at, event))
        if type(event) in _DECLARING and Hidden.of(event):
            self.services.redactor.learn(event)

    async def commit(self, *, release: bool = False, force_checkpoint: bool = False) -> None:
        # Calls a step makes at once commit one after another: each commits what was
        # buffered when its turn came, and what is buffered meanwhile waits for the next.
        async with self._commit_turn:
            todo = await self._commit(release=release, force_checkpoint=force_checkpoint)
        for fn in todo:
            await fn()

    async def _commit(
        self, *, release: bool, force_checkpoint: bool,
    ) -> list[Callable[[], Awaitable[None]]]:
        """Commit what is buffered; return the work that waited for it."""
        if not self.pending:
            return []
        svc, s = self.services, self.state
        taken, consumed, todo = list(self.pending), list(self.consumed), list(self.after_commit)
        blobs: dict[str, bytes] = {}
        try:
            checkpoint = None
            if force_checkpoint or release or s.seq - self.checkpoint_seq >= svc.checkpoint_every:
                # The last event commits to the checkpoint's digest: see underway.checkpoint.
                stored, checkpoint = svc.journal.encode_checkpointed(
                    s, taken, self.last_hash, blobs
                )
            else:
                stored = svc.journal.encode(s.tenant_id, s.run_id, taken,
                                            self.last_hash, blobs, s.subject)
        except (TypeError, ValueError) as exc:
            kinds = sorted({type(e).__name__ for _, _, e in taken})
            raise Unencodable(
                f"the step produced data that cannot be journaled ({exc}) in one of "
                f"{', '.join(kinds)}; return and record only JSON values"
            ) from exc
        fresh = svc.journal.unknown_blobs(s.tenant_id, blobs)
        for blob in fresh.values():
            if isinstance(blob, LargeBlob) and not blob.written:
                # Written before the batch, a chunk a transaction on the store's I/O
                # thread: the other runs' commits go between them, none waits for all.
                await self.store(_write_chunks, svc.store, s.tenant_id, blob)
        now = svc.clock.now()
        # The run row is a projection: a step that leaves the run ready and leased changes
        # nothing a reader of the row needs, so only its events are written.
        update = (
            expected_update(s, now, self.due_at)
            if release or s.status != self.row_status else None
        )
        codec = svc.journal.codec
        if update is not None and update.error is not None and codec.sealer is not None:
            # Why a run failed or escalated says what it was about: sealed like a payload.
            update = dataclasses.replace(update, error=codec.seal_text(
                update.error, run_error_where(s.tenant_id, s.run_id, s.subject)))
        batch = AppendBatch(
            tenant_id=s.tenant_id,
            run_id=s.run_id,
            expected_seq=taken[0][0] - 1,
            fence=self.lease.token,
            events=stored,
            now=now,
            update=update,
            blobs=fresh,
            checkpoint=checkpoint,
            consumed_signals=consumed,
            release=release,
            signals=outbox(s, [e for _, _, e in taken], now, codec),
            labels=labels_set((e for _, _, e in taken), s.lineage_record),
        )
        faults.point("append.before_commit")
        self.control_pending = await self._append(batch)
        faults.point("append.after_commit")
        if batch.signals:
            faults.point("signals.after_commit")
        svc.journal.remember(s.tenant_id, fresh)
        if blobs:
            svc.journal.codec.forget_large()
        self.last_hash = stored[-1].hash
        if svc.metrics.enabled:
            svc.metrics.committed(s.tenant_id, s.run_id, s.flow, taken)
        if update is not None:
            self.row_status = update.status
        if checkpoint is not None:
            self.checkpoint_seq = checkpoint[0]
        del self.pending[:len(taken)]
        del self.consumed[:len(consumed)]
        del self.after_commit[:len(todo)]
        return todo


def _write_chunks(store: CoreStore, tenant_id: str, blob: LargeBlob) -> None:
    """Write a chunked blob's chunks (on the store's I/O thread), once."""
    if not blob.written:
        store.write_blob_chunks(tenant_id, blob.key, blob.chunks())
        blob.written = True
