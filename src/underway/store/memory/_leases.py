"""The in-memory store's queue and leases (:class:`~underway.store.leases.LeaseStore`) and
its limits (:class:`~underway.store.limits.LimitStore`): queues and circuit breakers."""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import limits
from ..records import FINAL, Lease, NewRun, QueueConfig, RunRecord, SignalRecord, StartedRun


class MemoryLeases:
    """Claims, leases, queue limits and circuits, on the memory store's dictionaries."""

    _lock: threading.RLock
    _runs: dict[tuple[str, str], RunRecord]
    _signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]]
    _queues: dict[str, QueueConfig]
    _buckets: dict[limits.BucketKey, limits.Bucket]
    _circuits: dict[tuple[str, str], tuple[int, float | None, float | None]]

    if TYPE_CHECKING:
        # Written by other parts of the store.
        def create_run(self, new: NewRun) -> tuple[RunRecord, bool]: ...

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
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits;
        the dead holders' leases in ``expire`` end first."""
        with self._lock:
            for dead in expire:
                self.expire_lease(*dead)
            configs = limits.limited(
                c for c in self._queues.values() if queues is None or c.name in queues
            )
            leased = {
                name: sum(
                    1 for r in self._runs.values() if r.queue == name
                    and r.lease_owner is not None and (r.lease_expires_at or 0) >= now
                )
                for name in configs
            }
            plan = limits.ClaimPlan(
                configs, leased, {k: b for k, b in self._buckets.items() if k[0] in configs},
                now=now, limit=limit,
            )
            leases = []
            while plan.wants_more():
                full, empty = set(plan.full()), set(plan.empty())
                due = [
                    r for r in self._runs.values()
                    if r.next_wake_at is not None and r.next_wake_at <= now
                    and r.status not in FINAL
                    and (r.lease_owner is None or (r.lease_expires_at or 0) < now)
                    and (queues is None or r.queue in queues)
                    and (tenant_id is None or r.tenant_id == tenant_id)
                    and (run_id is None or r.run_id == run_id)
                    and r.queue not in full
                    and not (r.lease_token == 0 and (
                        (r.queue, limits.SHARED) in empty or (r.queue, r.tenant_id) in empty))
                ]
                due.sort(key=lambda r: (r.next_wake_at or 0.0, r.run_id))
                # A tenant's runs in flight count as turns it has taken.
                turns = Counter(
                    r.tenant_id for r in self._runs.values()
                    if r.lease_owner is not None and (r.lease_expires_at or 0) >= now
                    and (queues is None or r.queue in queues)
                )
                ranked = []
                for r in due:
                    turns[r.tenant_id] = turns.get(r.tenant_id, 0) + 1
                    ranked.append((turns[r.tenant_id], r.next_wake_at or 0.0, r.tenant_id, r))
                ranked.sort(key=lambda x: (x[0], x[1], x[2], x[3].run_id))
                for cand in plan.admit(
                    limits.Candidate(r.tenant_id, r.run_id, r.queue, r.lease_token == 0)
                    for *_, r in ranked[:plan.wanted()]
                ):
                    r = self._runs[(cand.tenant_id, cand.run_id)]
                    token = r.lease_token + 1
                    self._runs[(r.tenant_id, r.run_id)] = dataclasses.replace(
                        r, lease_owner=owner, lease_token=token, lease_expires_at=now + ttl
                    )
                    leases.append(Lease(r.tenant_id, r.run_id, owner, token, now + ttl))
            for key, tokens in plan.spent.items():
                self._buckets[key] = limits.Bucket(tokens, now)
            return leases

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create (or find) the run and claim it, under one hold of the lock."""
        with self._lock:
            rec, created = self.create_run(new)
            leases = self.claim(owner=owner, now=now, ttl=ttl, tenant_id=rec.tenant_id,
                                run_id=rec.run_id, queues=queues)
            inbox = bool(leases) and any(
                not consumed for _, consumed in self._signals.get(
                    (rec.tenant_id, rec.run_id), {}).values())
            return StartedRun(self._runs[(rec.tenant_id, rec.run_id)], created,
                              leases[0] if leases else None, inbox)

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """Earliest due time of an unfinished, unheld run of the queues."""
        with self._lock:
            due = [
                r.next_wake_at for r in self._runs.values()
                if r.next_wake_at is not None and r.status not in FINAL
                and (r.lease_owner is None or (r.lease_expires_at or 0) < now)
                and (queues is None or r.queue in queues)
            ]
        return min(due) if due else None

    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits; its rate buckets start full."""
        with self._lock:
            self._queues[config.name] = config
            self._buckets = {k: b for k, b in self._buckets.items() if k[0] != config.name}

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue."""
        with self._lock:
            return [self._queues[name] for name in sorted(self._queues)]

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits."""
        with self._lock:
            self._buckets = {k: b for k, b in self._buckets.items() if k[0] != name}
            return self._queues.pop(name, None) is not None

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a held lease."""
        key = (lease.tenant_id, lease.run_id)
        with self._lock:
            r = self._runs.get(key)
            if r is None or r.lease_owner != lease.owner or r.lease_token != lease.token:
                return None
            self._runs[key] = dataclasses.replace(r, lease_expires_at=now + ttl)
        return dataclasses.replace(lease, expires_at=now + ttl)

    def release(self, lease: Lease, *, retry_at: float | None = None) -> None:
        """Give a lease back (not due again before ``retry_at`` when given)."""
        key = (lease.tenant_id, lease.run_id)
        with self._lock:
            r = self._runs.get(key)
            if r is not None and r.lease_owner == lease.owner and r.lease_token == lease.token:
                wake = r.next_wake_at
                if retry_at is not None:
                    wake = retry_at if wake is None else max(wake, retry_at)
                self._runs[key] = dataclasses.replace(
                    r, lease_owner=None, lease_expires_at=None, next_wake_at=wake
                )

    def held_leases(self, *, now: float) -> list[tuple[str, str, str]]:
        """Unexpired leases."""
        with self._lock:
            return [
                (r.tenant_id, r.run_id, r.lease_owner) for r in self._runs.values()
                if r.lease_owner is not None and (r.lease_expires_at or 0) >= now
            ]

    def expire_lease(self, tenant_id: str, run_id: str, owner: str) -> int:
        """End a dead owner's lease."""
        key = (tenant_id, run_id)
        with self._lock:
            r = self._runs.get(key)
            if r is None or r.lease_owner != owner:
                return 0
            self._runs[key] = dataclasses.replace(r, lease_expires_at=0.0)
            return 1

    def next_wake_at(self) -> float | None:
        """Earliest due time of unfinished runs."""
        with self._lock:
            due = [
                r.next_wake_at for r in self._runs.values()
                if r.next_wake_at is not None and r.status not in FINAL
            ]
        return min(due) if due else None

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """Closed, open, or the half-open trial."""
        with self._lock:
            failures, open_until, trial_until = self._circuits.get(
                (tenant_id, name), (0, None, None)
            )
            if open_until is None:
                return "closed"
            if now < open_until or (trial_until is not None and now < trial_until):
                return "open"
            self._circuits[(tenant_id, name)] = (failures, open_until, now + cooldown)
            return "trial"

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Close on success; open on the threshold-th failure or a failed trial."""
        with self._lock:
            failures, open_until, _ = self._circuits.get((tenant_id, name), (0, None, None))
            if ok:
                self._circuits[(tenant_id, name)] = (0, None, None)
            elif open_until is not None or failures + 1 >= threshold:
                self._circuits[(tenant_id, name)] = (failures + 1, now + cooldown, None)
            else:
                self._circuits[(tenant_id, name)] = (failures + 1, None, None)
