"""The retention role: finding finished runs past their retention period, purging one (its
payloads replaced by tombstones, in one transaction), the record of purges and sweeps, and
deleting blobs no longer referred to.

A purge is all or nothing: a sweep killed in the middle of one leaves the run as it was.
Blobs record when they were last written (by the database's clock, refreshed when an
append sends a blob again that was last written more than a day before), so that
:meth:`RetentionStore.delete_blobs` spares a blob an append is writing while the
collector decides.

A purged run is forgotten (:meth:`RetentionStore.forget_run`) once a second period is
over: every row of it deleted, in one transaction with a line appended to its tenant's
forget log, a hash chain (:func:`forget_hash`) that names the run and the head its
journal ended at, so an audit with anchors tells a forgotten run from a lost one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Literal, Protocol

from ..errors import ConflictError
from ..events import canonical_json
from .records import FINAL, Forget, ForgottenRun, Purge, PurgedRun, RunRecord, SweepRecord

__all__ = ["ForgetResult", "PurgeResult", "RetentionStore", "forget_genesis", "forget_hash"]

BLOB_REFRESH = 86_400.0
"""An append that sends a blob already stored marks it written again when it was last
written more than this many seconds before (sooner, it changes nothing)."""


PurgeResult = Literal["purged", "already", "held"]
"""What :meth:`RetentionStore.purge_run` did: purged the run, found it ``already`` purged,
or found it ``held`` by a legal hold (on the run, or on the subject its row names)."""


ForgetResult = Literal["forgotten", "gone", "unpurged", "held"]
"""What :meth:`RetentionStore.forget_run` did: forgot the run, found it ``gone`` (no row:
forgotten already, or never there), found it ``unpurged`` (no purge record: only a purged
run is ever forgotten), or found it ``held`` by a legal hold."""


def forget_genesis(tenant_id: str) -> str:
    """The hash a tenant's forget log starts from (the ``prev`` of its first line)."""
    return hashlib.sha256(b"underway forget log\n" + tenant_id.encode("utf-8")).hexdigest()


def forget_hash(prev: str, rec: ForgottenRun) -> str:
    """The chain hash of a forget log line: SHA-256 over the hash of the line before it
    and the line's fields (every one but ``hash``)."""
    body = canonical_json([rec.tenant_id, rec.seq, rec.run_id, rec.last_seq, rec.head,
                           rec.sweep_id, repr(float(rec.forgotten_at))])
    return hashlib.sha256(prev.encode("ascii") + b"\n" + body).hexdigest()


class RetentionStore(Protocol):
    """Purges finished runs and keeps the log of retention sweeps."""

    def retention_candidates(
        self, tenant_id: str, *, status: str, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """The tenant's finished runs that are not purged yet, oldest first.

        They are sorted by ``updated_at`` (when they ended), then run id.

        Args:
            tenant_id: The tenant.
            status: The final status: ``completed``, ``failed`` or ``cancelled``.
            ended_before: Only runs last written before this time.
            flow: Only runs of this flow.
            after: Only runs after this one: ``(updated_at, run_id)`` of the last run of the
                previous page.
            limit: The most runs returned.
        """
        ...

    def purge_run(self, purge: Purge) -> PurgeResult:
        """Purge the run in one transaction (see :class:`~underway.store.records.Purge`),
        unless it was purged ``already`` or a standing legal hold on it or on its subject
        ``held`` it (then nothing changed: the hold is checked in the transaction). Raises
        :class:`~underway.errors.ConflictError`, changing nothing, when the run is gone,
        not final, its journal does not end at ``last_seq``, or a stored event's seq, type
        or hash differs from its tombstone's."""
        ...

    def purged_runs(
        self, tenant_id: str, *, sweep_id: str | None = None, run_id: str | None = None,
        limit: int = 100,
    ) -> list[PurgedRun]:
        """The tenant's purges, newest first.

        Args:
            tenant_id: The tenant.
            sweep_id: Only the purges of this sweep.
            run_id: Only the purges of this run.
            limit: The most purges returned.
        """
        ...

    def forget_candidates(
        self, tenant_id: str, *, ended_before: float, flow: str | None = None,
        after: tuple[float, str] | None = None, limit: int = 100,
    ) -> list[RunRecord]:
        """The tenant's purged runs that ended before a time, oldest first.

        They are sorted by ``updated_at`` (when they ended), then run id.

        Args:
            tenant_id: The tenant.
            ended_before: Only runs last written before this time.
            flow: Only runs of this flow.
            after: Only runs after this one: ``(updated_at, run_id)`` of the last run of the
                previous page.
            limit: The most runs returned.
        """
        ...

    def forget_run(self, forget: Forget) -> ForgetResult:
        """Forget a purged run in one transaction (see
        :class:`~underway.store.records.Forget`): delete its row, events, purge record,
        checkpoints, signals, labels, span cursor and stream deltas, and append its line
        to the tenant's forget log — unless it is ``gone``, ``unpurged`` or ``held``
        (then nothing changed). Raises :class:`~underway.errors.ConflictError`, changing
        nothing, when its row is not final or no longer ends at ``last_seq`` and
        ``head``."""
        ...

    def forgotten_runs(
        self, tenant_id: str, *, after: int = 0, sweep_id: str | None = None,
        limit: int = 1000,
    ) -> list[ForgottenRun]:
        """The tenant's forget log, in order.

        Args:
            tenant_id: The tenant.
            after: Only lines after this one (their ``seq``; 0 reads from the first).
            sweep_id: Only the lines of this sweep.
            limit: The most lines returned.
        """
        ...

    def blob_keys(self, tenant_id: str, *, after: str | None = None,
                  limit: int = 1000) -> list[str]:
        """The keys of the tenant's blobs, sorted.

        Args:
            tenant_id: The tenant.
            after: Only keys greater than it.
            limit: The most keys returned.
        """
        ...

    def delete_blobs(self, tenant_id: str, keys: Sequence[str], *, idle: float) -> int:
        """Delete those of the tenant's blobs ``keys`` that were not written lately.

        Args:
            tenant_id: The tenant.
            keys: The blobs' keys.
            idle: Spare a blob written in the last ``idle`` seconds (by the database's clock).

        Returns:
            How many blobs were deleted.
        """
        ...

    def record_sweep(self, rec: SweepRecord) -> None:
        """Write the log entry of a sweep in a tenant (replacing the one with the same
        sweep id and tenant: a sweep records its start, then its end)."""
        ...

    def list_sweeps(self, tenant_id: str | None = None, *, limit: int = 20) -> list[SweepRecord]:
        """Sweeps of ``tenant_id`` (every tenant when None), newest start first."""
        ...


def check_purge(purge: Purge, head: tuple[str, int, int, int] | None) -> None:
    """Refuse (:class:`ConflictError`) a purge of a run that is gone, not final, or whose
    journal is not the one the purge read: ``head`` is the run's (status, row's last seq,
    number of events, last event's seq)."""
    r = purge.run_id
    if head is None:
        raise ConflictError(f"run {r} is gone; nothing was purged")
    status, row_seq, events, last = head
    if status not in FINAL:
        raise ConflictError(f"run {r} is {status}, not finished; nothing was purged")
    n = len(purge.tombstones)
    if not (row_seq == last == events == n == purge.last_seq):
        raise ConflictError(f"run {r}: its journal ends at seq {last} ({events} events), "
                            f"not at the {purge.last_seq} the purge read; nothing was purged")


def check_forget(forget: Forget, head: tuple[str, int, str] | None) -> None:
    """Refuse (:class:`ConflictError`) to forget a run whose row is not final or does not
    end at the head the sweep read: ``head`` is the row's (status, last seq, last hash)."""
    r = forget.run_id
    if head is None:
        return
    status, seq, last_hash = head
    if status not in FINAL:
        raise ConflictError(f"run {r} is {status}, not finished; nothing was forgotten")
    if (seq, last_hash) != (forget.last_seq, forget.head):
        raise ConflictError(f"run {r}: its row ends at seq {seq}, not at the head the "
                            "sweep read; nothing was forgotten")


def next_forgotten(forget: Forget, last: tuple[int, str] | None) -> ForgottenRun:
    """The forget log line of ``forget``, chained after ``last`` (the tenant's last line's
    seq and hash; None when its log is empty)."""
    seq, prev = last if last is not None else (0, forget_genesis(forget.tenant_id))
    line = ForgottenRun(forget.tenant_id, seq + 1, forget.run_id, forget.last_seq,
                        forget.head, forget.sweep_id, forget.at, "")
    return ForgottenRun(line.tenant_id, line.seq, line.run_id, line.last_seq, line.head,
                        line.sweep_id, line.forgotten_at, forget_hash(prev, line))
