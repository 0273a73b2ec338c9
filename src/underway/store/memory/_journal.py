"""The in-memory store's journal (:class:`~underway.store.journal.JournalStore`): runs'
events, checkpoints and blobs, appended under one lock."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ...errors import ConflictError, FencedError, RunNotFound
from ..journal import CHAIN_LIMIT, AppendResult
from ..records import (
    FINAL,
    AppendBatch,
    CheckpointTail,
    ForkLink,
    NewRun,
    RunRecord,
    SignalRecord,
    StoredEvent,
    StoredLabel,
)

_LINK = b'{"p":"'
"""How a blob that links to another begins (a codec list node); the key follows."""


class MemoryJournal:
    """Events, checkpoints and blobs, on the memory store's dictionaries."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _events: dict[tuple[str, str], list[StoredEvent]]
    _checkpoints: dict[tuple[str, str], tuple[int, bytes]]
    _checkpoint_history: dict[tuple[str, str], dict[int, bytes]]
    _blobs: dict[tuple[str, str], bytes]
    _chunks: dict[tuple[str, str], list[bytes]]
    _labels: dict[tuple[str, str], dict[str, StoredLabel]]
    _signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]]

    if TYPE_CHECKING:
        # Written by other parts of the store.
        def _write_blobs(self, tenant_id: str, blobs: dict[str, bytes]) -> None: ...
        def send_signal(self, signal: SignalRecord) -> bool: ...

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run or return the one with the same idempotency key."""
        with self._lock:
            if new.idempotency_key is not None:
                for rec in self._runs.values():
                    if (rec.tenant_id, rec.flow, rec.idempotency_key) == (
                        new.tenant_id, new.flow, new.idempotency_key
                    ):
                        return rec, False
            key = (new.tenant_id, new.run_id)
            if key in self._runs:
                raise ConflictError(f"run {new.run_id} already exists in tenant {new.tenant_id}")
            rec = RunRecord(
                tenant_id=new.tenant_id, run_id=new.run_id, flow=new.flow, status="ready",
                step=new.step, idempotency_key=new.idempotency_key,
                last_seq=new.first_event.seq, last_hash=new.first_event.hash,
                next_wake_at=new.next_wake_at, waiting_signal=None, control_pending=False,
                lease_owner=None,
                lease_token=0, lease_expires_at=None, created_at=new.now, updated_at=new.now,
                error=None, queue=new.queue, subject=new.subject, purpose=new.purpose,
            )
            self._runs[key] = rec
            self._events[key] = [new.first_event]
            if new.labels:
                self._labels[key] = {x.key: x for x in new.labels}
            self._write_blobs(new.tenant_id, new.blobs)
            return rec, True

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append each batch on its own (memory has no commit to share)."""
        out: list[AppendResult] = []
        for batch in batches:
            try:
                out.append(self.append(batch))
            except Exception as exc:
                out.append(exc)
        return out

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically, fenced and sequence-checked."""
        if not batch.events:
            return False
        key = (batch.tenant_id, batch.run_id)
        with self._lock:
            rec = self._runs.get(key)
            if rec is None:
                raise RunNotFound(batch.tenant_id, batch.run_id)
            if rec.lease_token != batch.fence or rec.lease_owner is None:
                raise FencedError(
                    f"run {batch.run_id}: lease token {batch.fence} is stale "
                    f"(current {rec.lease_token}); another worker owns this run"
                )
            events = self._events[key]
            last_seq = events[-1].seq if events else 0
            if last_seq != batch.expected_seq:
                raise ConflictError(
                    f"run {batch.run_id}: expected last seq {batch.expected_seq}, "
                    f"found {last_seq}"
                )
            u, last = batch.update, batch.events[-1]
            changes: dict[str, object] = {}
            if u is not None:
                changes.update(
                    last_seq=last.seq, last_hash=last.hash, status=u.status, step=u.step,
                    next_wake_at=u.next_wake_at, waiting_signal=u.waiting_signal, error=u.error,
                    request_kind=u.request_kind, updated_at=batch.now,
                )
            if batch.release:
                changes.update(lease_owner=None, lease_expires_at=None)
            inbox = self._signals.get(key, {})
            for sid in batch.consumed_signals:
                if sid in inbox:
                    inbox[sid] = (inbox[sid][0], True)
            control = any(
                s.name.startswith("underway.") and not done for s, done in inbox.values()
            )
            changes["control_pending"] = control
            waited = u is not None and u.waiting_signal is not None and any(
                s.name == u.waiting_signal and not done for s, done in inbox.values()
            )
            status = u.status if u is not None else rec.status
            if status not in FINAL and (waited or (batch.release and control)):
                changes["next_wake_at"] = batch.now
            # A step that leaves the row as it was (ready, leased, nothing new to act on)
            # is not copied into an equal row.
            if any(getattr(rec, k) != v for k, v in changes.items()):
                self._runs[key] = dataclasses.replace(rec, **changes)  # type: ignore[arg-type]
            self._events[key].extend(batch.events)
            if batch.labels:
                self._labels.setdefault(key, {}).update((x.key, x) for x in batch.labels)
            for signal in batch.signals:
                self.send_signal(signal)
            self._write_blobs(batch.tenant_id, batch.blobs)
            if batch.checkpoint is not None:
                old = self._checkpoints.get(key)
                if old is not None and old[0] < batch.checkpoint[0]:
                    self._checkpoint_history.setdefault(key, {})[old[0]] = old[1]
                self._checkpoints[key] = batch.checkpoint
            return control

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Create the fork and append the parent's event, both or neither."""
        parent_key = (link.tenant_id, link.run_id)
        with self._lock:
            parent = self._runs.get(parent_key)
            if parent is None:
                raise RunNotFound(link.tenant_id, link.run_id)
            if parent.lease_owner is not None and (parent.lease_expires_at or 0) >= link.now:
                raise ConflictError(
                    f"run {link.run_id} is being advanced by {parent.lease_owner}; fork it "
                    "once that worker has handed it back")
            events = self._events[parent_key]
            head = events[-1].seq if events else 0
            if head != link.expected_seq:
                raise ConflictError(
                    f"run {link.run_id}: expected last seq {link.expected_seq}, found {head}")
            if (new.tenant_id, new.run_id) in self._runs:
                raise ConflictError(f"run {new.run_id} already exists in tenant {new.tenant_id}")
            forked, _ = self.create_run(dataclasses.replace(new, idempotency_key=None))
            events.append(link.event)
            self._runs[parent_key] = dataclasses.replace(
                parent, last_seq=link.event.seq, last_hash=link.event.hash,
                updated_at=link.now)
            return forked

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """Checkpoints with their tails, of the runs that have one."""
        with self._lock:
            found = {}
            for run_id in run_ids:
                row = self._checkpoints.get((tenant_id, run_id))
                if row is not None:
                    tail = [e for e in self._events.get((tenant_id, run_id), [])
                            if e.seq >= row[0]]
                    found[run_id] = CheckpointTail(row[0], row[1], tail)
            return found

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events after ``after_seq``."""
        with self._lock:
            return [e for e in self._events.get((tenant_id, run_id), []) if e.seq > after_seq]

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """Events of some types of many runs."""
        kinds = set(types)
        found: dict[str, list[StoredEvent]] = {}
        with self._lock:
            for run_id in sorted(set(run_ids)):
                events = [e for e in self._events.get((tenant_id, run_id), [])
                          if e.type in kinds]
                if events:
                    found[run_id] = events
        return found

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint."""
        return self._checkpoints.get((tenant_id, run_id))

    def checkpoint_before(
        self, tenant_id: str, run_id: str, seq: int
    ) -> CheckpointTail | None:
        """The newest checkpoint before ``seq``, with the events through ``seq``."""
        key = (tenant_id, run_id)
        with self._lock:
            kept = dict(self._checkpoint_history.get(key, {}))
            current = self._checkpoints.get(key)
            if current is not None:
                kept[current[0]] = current[1]
            at = max((s for s in kept if s < seq), default=None)
            if at is None:
                return None
            tail = [e for e in self._events.get(key, []) if at <= e.seq <= seq]
            return CheckpointTail(at, kept[at], tail)

    def kept_checkpoints(self, tenant_id: str, run_id: str) -> list[tuple[int, bytes]]:
        """The checkpoints a newer one replaced, oldest first."""
        with self._lock:
            return sorted(self._checkpoint_history.get((tenant_id, run_id), {}).items())

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints (and the ones they replaced)."""
        with self._lock:
            doomed = [
                k for k in self._checkpoints
                if k[0] == tenant_id and (run_id is None or k[1] == run_id)
            ]
            for k in doomed:
                del self._checkpoints[k]
                self._checkpoint_history.pop(k, None)
            return len(doomed)

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key."""
        return {k: self._blobs[(tenant_id, k)] for k in keys if (tenant_id, k) in self._blobs}

    def write_blob_chunks(self, tenant_id: str, key: str, chunks: Iterable[bytes]) -> None:
        """Keep a chunked blob's chunks.

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            chunks: The stored bytes of each chunk, in order.
        """
        got = list(chunks)
        with self._lock:
            self._chunks[(tenant_id, key)] = got

    def read_blob_chunk(self, tenant_id: str, key: str, idx: int) -> bytes | None:
        """Chunk ``idx`` of a chunked blob (None: not stored).

        Args:
            tenant_id: The blob's tenant.
            key: Its address.
            idx: The chunk's index (from 0).
        """
        got = self._chunks.get((tenant_id, key))
        return got[idx] if got is not None and 0 <= idx < len(got) else None

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """The blob and the blobs it links to (see the protocol for what links)."""
        found: dict[str, bytes] = {}
        next_key: str | None = key
        while next_key is not None and len(found) < limit:
            data = self._blobs.get((tenant_id, next_key))
            if data is None or next_key in found:
                break
            found[next_key] = data
            next_key = data[6:70].decode("ascii", "replace") if data[:6] == _LINK else None
        return found
