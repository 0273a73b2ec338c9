"""The lease role: the queue of due runs, and the leases that let one worker append to a run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from . import limits
from .records import FINAL, Lease, NewRun, RowRepair, RunRecord, StartedRun

__all__ = ["MAX_LEASE_TTL", "LeaseStore"]

MAX_LEASE_TTL = 3600.0
"""The longest lease a worker takes, in seconds. A lease that expires further ahead than
this was taken by no worker: nobody renews it, and it would hold the run for good."""


class LeaseStore(Protocol):
    """Claims due runs, renews and releases leases, and says when work comes due."""

    def claim(
        self,
        *,
        owner: str,
        now: float,
        ttl: float,
        limit: int = 1,
        tenant_id: str | None = None,
        run_id: str | None = None,
        queues: list[str] | None = None,
        expire: Sequence[tuple[str, str, str]] = (),
    ) -> list[Lease]:
        """Lease runs that are due and not leased by anyone else.

        The queues' limits (:class:`~underway.store.records.QueueConfig`) hold in the same
        transaction. A queue at its ``max_concurrency`` yields nothing, and a run's first
        activation takes a token from its rate bucket or waits. Runs are taken round-robin
        across tenants: each tenant's earliest due run, then each tenant's second, and so on.
        A tenant's runs already leased count as turns it has had. So one tenant's backlog
        cannot starve another.

        Args:
            owner: The worker taking the leases.
            now: The time of the claim.
            ttl: How long the leases last, in seconds.
            limit: The most runs leased.
            tenant_id: Only runs of this tenant.
            run_id: Only this run.
            queues: Only runs of these queues (None: every queue).
            expire: (tenant, run, owner) of leases whose holders are known dead. Each ends
                as :meth:`expire_lease` ends it, in the claim's transaction and before runs
                are chosen, whether or not the claim then takes the run. A takeover so
                commits once.
        """
        ...

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create the run and lease it to ``owner``, in one transaction.

        The run is created as :meth:`~underway.store.journal.JournalStore.create_run` does, or
        the one with the same idempotency key is found. It is leased as :meth:`claim` with its
        ``run_id`` would. So only when it is due at ``now``, unfinished, and held by nobody (an
        expired lease is nobody's). Its queue's limits must admit it: a first activation takes a
        token from its rate bucket. A process that will advance the run at once calls this
        ("eager start"): one commit instead of a start's and a claim's.

        Args:
            new: The run to create.
            owner: The worker taking the lease.
            now: The time of the start.
            ttl: How long the lease lasts, in seconds.
            queues: The queues the worker serves (None: every queue).
        """
        ...

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a lease still held.

        Args:
            lease: The lease.
            now: The time of the renewal.
            ttl: How long the lease lasts from ``now``, in seconds.

        Returns:
            The extended lease; None when it was lost.
        """
        ...

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Give a lease back without appending; with ``retry_at`` the run is not due again
        before then (a run handed back after a failure is never claimed in a loop)."""
        ...

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """(tenant, run, owner) of every unexpired lease."""
        ...

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End ``owner``'s lease on the run now: its holder is known dead.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            owner: The lease's holder.

        Returns:
            1 if a lease ended, else 0.
        """
        ...

    def suspect_runs(
        self, *, now: float, limit: int = 100, since: float | None = None,
    ) -> list[tuple[str, str]]:
        """(tenant, run) of rows that the journal likely contradicts and that would stop
        their run for good: a wake time or lease expiry that is no time (text on SQLite,
        NaN or infinite), a lease no worker can hold (no expiry, or further ahead than
        :data:`MAX_LEASE_TTL`), a finished status whose head event
        is no end, a ready run or a timer's run with no wake time. At most ``limit``, in
        (tenant, run) order. With ``since``, only rows written (``updated_at``) at or after
        it are checked, found by an index: a look that reads only what changed.

        Args:
            now: The time leases and wake times are judged at.
            limit: How many rows at most, in (tenant, run) order.
            since: Check only the rows written at or after this time (None: every row).
        """
        ...

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Rewrite the row as ``repair`` says, if it is still as ``repair.seen`` and the
        journal's head is still ``repair.head_seq``; True when it was rewritten. With
        ``repair.token`` the lease with that token is released in the same write."""
        ...

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """The earliest ``next_wake_at`` of an unfinished run of ``queues`` (every queue
        when None) that no unexpired lease holds; at or before ``now`` when one is due."""
        ...

    def next_wake_at(self) -> float | None:
        """The earliest time any unfinished, unleased run becomes due."""
        ...


def eager_candidate(
    run: RunRecord, *, now: float, queues: list[str] | None
) -> limits.Candidate | None:
    """``run`` as a claim would see it at ``now``: a candidate when it is due, unfinished,
    held by nobody and of ``queues`` — its queue's limits not yet asked — else None."""
    if run.next_wake_at is None or run.next_wake_at > now or run.status in FINAL:
        return None
    if run.lease_owner is not None and (run.lease_expires_at or 0.0) >= now:
        return None
    if queues is not None and run.queue not in queues:
        return None
    return limits.Candidate(run.tenant_id, run.run_id, run.queue, run.lease_token == 0)
