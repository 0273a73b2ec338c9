"""Leases, the inbox, approvers, queues and circuits of a
:class:`~underway.store.regional.RegionalStore`: a worker's claim serves every region."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..base import Store
from ..records import (
    ApproverRecord,
    Lease,
    NewRun,
    QueueConfig,
    RowRepair,
    SignalRecord,
    StartedRun,
)


class RegionalLeases:
    """The lease, inbox, registry and limits roles of a regional store."""

    if TYPE_CHECKING:  # given by the regional store this is mixed into
        def _of(self, tenant_id: str) -> Store: ...

        def _all(self) -> Iterable[Store]: ...

        regions: dict[str, Store]
        _turn: itertools.count[int]

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create and lease the run in its tenant's region."""
        return self._of(new.tenant_id).start_leased(new, owner=owner, now=now, ttl=ttl,
                                                    queues=queues)

    def claim(
        self, *, owner: str, now: float, ttl: float, limit: int = 1,
        tenant_id: str | None = None, run_id: str | None = None,
        queues: list[str] | None = None, expire: Sequence[tuple[str, str, str]] = (),
    ) -> list[Lease]:
        """Lease due runs: of the tenant, in its region.

        Without a tenant, from each region in turn, starting with the next region on each call,
        until ``limit`` are leased. Each dead holder's lease in ``expire`` ends in its run's
        region: in that region's claim when it claims, else on its own.
        """
        dead: dict[int, tuple[Store, list[tuple[str, str, str]]]] = {}
        for lease in expire:
            region = self._of(lease[0])
            dead.setdefault(id(region), (region, []))[1].append(lease)

        def ending(region: Store) -> list[tuple[str, str, str]]:
            return dead.pop(id(region), (region, []))[1]

        leases: list[Lease] = []
        if tenant_id is not None:
            region = self._of(tenant_id)
            leases = region.claim(owner=owner, now=now, ttl=ttl, limit=limit,
                                  tenant_id=tenant_id, run_id=run_id, queues=queues,
                                  expire=ending(region))
        else:
            stores = list(self._all())
            first = next(self._turn) % len(stores)
            for s in stores[first:] + stores[:first]:
                if len(leases) >= limit:
                    break
                leases += s.claim(owner=owner, now=now, ttl=ttl, limit=limit - len(leases),
                                  run_id=run_id, queues=queues, expire=ending(s))
        for region, rest in dead.values():
            for lease in rest:
                region.expire_lease(*lease)
        return leases

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Renew in the lease's region."""
        return self._of(lease.tenant_id).renew(lease, now=now, ttl=ttl)

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Release in the lease's region."""
        self._of(lease.tenant_id).release(lease, retry_at=retry_at)

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """Leases held, in every region."""
        return sorted(h for s in self._all() for h in s.held_leases(now=now))

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End a lease in the tenant's region."""
        return self._of(tenant_id).expire_lease(tenant_id, run_id, owner)

    def suspect_runs(
        self, *, now: float, limit: int = 100, since: float | None = None,
    ) -> list[tuple[str, str]]:
        """Suspect rows of every region.

        Args:
            now: The time leases and wake times are judged at.
            limit: How many rows at most, in (tenant, run) order.
            since: Check only the rows written at or after this time (None: every row).
        """
        found = (r for s in self._all()
                 for r in s.suspect_runs(now=now, limit=limit, since=since))
        return sorted(found)[:limit]

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Repair in the run's region."""
        return self._of(repair.tenant_id).repair_run(repair, now=now)

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """The earliest due time of every region."""
        return earliest(s.next_due_at(now=now, queues=queues) for s in self._all())

    def next_wake_at(self) -> float | None:
        """The earliest wake time of every region."""
        return earliest(s.next_wake_at() for s in self._all())

    def send_signal(self, signal: SignalRecord) -> bool:
        """Deliver in the run's region."""
        return self._of(signal.tenant_id).send_signal(signal)

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """A run's inbox, from the tenant's region."""
        return self._of(tenant_id).pending_signals(tenant_id, run_id)

    def actionable_signals(
        self, tenant_id: str, run_id: str, *, waiting: str | None
    ) -> list[SignalRecord]:
        """What an activation acts on of a run's inbox, from the tenant's region."""
        return self._of(tenant_id).actionable_signals(tenant_id, run_id, waiting=waiting)

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a nonce in the tenant's region."""
        return self._of(tenant_id).use_nonce(tenant_id, nonce, run_id=run_id,
                                             request_id=request_id, at=at)

    def put_approver(self, rec: ApproverRecord) -> None:
        """Register an approver in its tenant's region."""
        self._of(rec.tenant_id).put_approver(rec)

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """An approver, from the tenant's region."""
        return self._of(tenant_id).get_approver(tenant_id, approver_id)

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """The tenant's approvers, from its region."""
        return self._of(tenant_id).list_approvers(tenant_id)

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver in the tenant's region."""
        return self._of(tenant_id).revoke_approver(tenant_id, approver_id, at=at)

    def set_queue(self, config: QueueConfig) -> None:
        """Set a queue's limits in every region."""
        for s in self._all():
            s.set_queue(config)

    def list_queues(self) -> list[QueueConfig]:
        """The queues of the first region (every region has the same)."""
        return next(iter(self.regions.values())).list_queues()

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits in every region."""
        return any([s.delete_queue(name) for s in self._all()])

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """A circuit's verdict, from the tenant's region."""
        return self._of(tenant_id).circuit_admit(tenant_id, name, now=now, cooldown=cooldown)

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Record a call's outcome in the tenant's region."""
        self._of(tenant_id).circuit_record(tenant_id, name, ok=ok, now=now,
                                           threshold=threshold, cooldown=cooldown)


def earliest(times: Iterable[float | None]) -> float | None:
    """The earliest of the times given, None when every one is None."""
    found = [t for t in times if t is not None]
    return min(found) if found else None
