"""The lease role: the queue of due runs, and the leases that let one worker append to a run."""

from __future__ import annotations

from typing import Protocol

from .records import Lease


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
    ) -> list[Lease]:
        """Lease up to ``limit`` runs that are due and not leased by anyone else, of the
        named ``queues`` (every queue when None).

        The queues' limits (:class:`~underway.store.records.QueueConfig`) hold in the same
        transaction: a queue at its ``max_concurrency`` yields nothing, and a run's first
        activation takes a token from its rate bucket or waits. Runs are taken round-robin
        across tenants (each tenant's earliest due run, then each tenant's second, ...,
        where a tenant's runs already leased count as turns it has had), so one tenant's
        backlog cannot starve another.
        """
        ...

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a lease still held; None when it was lost."""
        ...

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Give a lease back without appending; with ``retry_at`` the run is not due again
        before then (a run handed back after a failure is never claimed in a loop)."""
        ...

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """(tenant, run, owner) of every unexpired lease."""
        ...

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End ``owner``'s lease on the run now (its holder is known dead); 1 if it did."""
        ...

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """The earliest ``next_wake_at`` of an unfinished run of ``queues`` (every queue
        when None) that no unexpired lease holds; at or before ``now`` when one is due."""
        ...

    def next_wake_at(self) -> float | None:
        """The earliest time any unfinished, unleased run becomes due."""
        ...
