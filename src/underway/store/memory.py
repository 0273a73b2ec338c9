"""In-memory store: the same protocol and rules as the databases, for tests."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Sequence

from ..codec import Codec
from ..errors import ConflictError, FencedError, RunNotFound
from . import limits
from ._offload import INLINE, Inline
from .base import Dialect
from .journal import CHAIN_LIMIT, AppendResult
from .memory_access import MemoryAccess
from .memory_budgets import MemoryBudgets
from .memory_consent import MemoryConsent
from .memory_keys import MemoryKeys
from .memory_retention import MemoryRetention
from .memory_rows import MemoryRows
from .records import (
    FINAL,
    AppendBatch,
    ApproverRecord,
    CheckpointTail,
    ForkLink,
    IntakeRecord,
    IntakeRequest,
    Lease,
    NewRun,
    QueueConfig,
    RunRecord,
    ScheduleRecord,
    SignalRecord,
    StartedRun,
    StoredEvent,
)
from .wakeups import Polling, Wakeups

SCHEMA_VERSION = 1

_LINK = b'{"p":"'
"""How a blob that links to another begins (a codec list node); the key follows."""


class MemoryStore(MemoryAccess, MemoryConsent, MemoryRetention, MemoryKeys, MemoryRows,
                  MemoryBudgets):
    """A :class:`~underway.store.base.Store` held in process memory.

    It does no I/O, so async code calls it inline (``offload``: see
    :mod:`underway.store._offload`)."""

    dialect: Dialect = "memory"
    offload: Inline = INLINE

    def __init__(self) -> None:
        MemoryAccess.__init__(self)
        MemoryConsent.__init__(self)
        MemoryRetention.__init__(self)
        MemoryKeys.__init__(self)
        MemoryBudgets.__init__(self)
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""
        self._lock = threading.RLock()
        self._runs: dict[tuple[str, str], RunRecord] = {}
        self._events: dict[tuple[str, str], list[StoredEvent]] = {}
        self._checkpoints: dict[tuple[str, str], tuple[int, bytes]] = {}
        self._blobs: dict[tuple[str, str], bytes] = {}
        self._signals: dict[tuple[str, str], dict[str, tuple[SignalRecord, bool]]] = {}
        self._schedules: dict[tuple[str, str], ScheduleRecord] = {}
        self._intake: dict[tuple[str, str], IntakeRecord] = {}
        self._owners: dict[tuple[str, str], str] = {}
        self._queues: dict[str, QueueConfig] = {}
        self._buckets: dict[limits.BucketKey, limits.Bucket] = {}
        self._version = 0
        self._circuits: dict[tuple[str, str], tuple[int, float | None, float | None]] = {}
        self._approvers: dict[tuple[str, str], ApproverRecord] = {}
        self._nonces: dict[tuple[str, str], tuple[str, str]] = {}

    def migrate(self) -> int:
        """Nothing to migrate in memory."""
        self._version = SCHEMA_VERSION
        return self._version

    def schema_version(self) -> int:
        """The schema version (1 once migrated)."""
        return self._version

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
                    updated_at=batch.now,
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
            self._runs[key] = dataclasses.replace(rec, **changes)  # type: ignore[arg-type]
            self._events[key].extend(batch.events)
            for signal in batch.signals:
                self.send_signal(signal)
            self._write_blobs(batch.tenant_id, batch.blobs)
            if batch.checkpoint is not None:
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

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints."""
        with self._lock:
            doomed = [
                k for k in self._checkpoints
                if k[0] == tenant_id and (run_id is None or k[1] == run_id)
            ]
            for k in doomed:
                del self._checkpoints[k]
            return len(doomed)

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row."""
        return self._runs.get((tenant_id, run_id))

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
        updated_since: float | None = None, updated_until: float | None = None,
        search: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, filtered and paged."""
        with self._lock:
            found = [
                r for r in self._runs.values()
                if r.tenant_id == tenant_id and (status is None or r.status == status)
                and (flow is None or r.flow == flow)
                and (since is None or r.created_at >= since)
                and (until is None or r.created_at < until)
                and (after is None or (-r.created_at, r.run_id) > (-after[0], after[1]))
                and (id_prefix is None or r.run_id.startswith(id_prefix))
                and (updated_since is None or r.updated_at >= updated_since)
                and (updated_until is None or r.updated_at < updated_until)
                and (search is None or search in r.run_id or search in r.flow)
            ]
        found.sort(key=lambda r: (-r.created_at, r.run_id))
        return found[:limit]

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The tenant's runs about a subject, oldest first."""
        with self._lock:
            found = sorted((r for r in self._runs.values()
                            if r.tenant_id == tenant_id and r.subject == subject),
                           key=lambda r: (r.created_at, r.run_id))
        return found if limit is None else found[:limit]

    def tenants(self) -> list[str]:
        """Tenants with runs."""
        return sorted({t for t, _ in self._runs})

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count) of the runs."""
        with self._lock:
            found = Counter((r.tenant_id, r.status) for r in self._runs.values())
        return [(t, s, n) for (t, s), n in sorted(found.items())]

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, status, count) of the runs created in a window."""
        with self._lock:
            found = Counter(
                (math.floor((r.created_at - since) / width), r.status)
                for r in self._runs.values()
                if r.tenant_id == tenant_id and since <= r.created_at < until
            )
        return [(b, s, n) for (b, s), n in sorted(found.items())]

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs whose journals may hold events of a window."""
        with self._lock:
            return sorted(
                r.run_id for r in self._runs.values()
                if r.tenant_id == tenant_id and r.created_at < until
                and (r.updated_at >= since or r.lease_owner is not None)
            )

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events."""
        with self._lock:
            keys = set(self._runs) | {k for k, v in self._events.items() if v}
        return sorted(k for k in keys if tenant_id is None or k[0] == tenant_id)

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events."""
        with self._lock:
            heads = [
                (t, r, events[-1].seq, events[-1].hash)
                for (t, r), events in self._events.items()
                if events and (tenant_id is None or t == tenant_id)
            ]
        return sorted(heads)

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
        """Lease due runs nobody holds, fairly across tenants, within the queues' limits."""
        with self._lock:
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

    def send_signal(self, signal: SignalRecord) -> bool:
        """Queue a signal once per id and wake the run if it waits for it."""
        key = (signal.tenant_id, signal.run_id)
        with self._lock:
            inbox = self._signals.setdefault(key, {})
            if signal.signal_id in inbox:
                return False
            inbox[signal.signal_id] = (signal, False)
            r = self._runs.get(key)
            control = signal.name.startswith("underway.")
            if r is not None and r.status not in FINAL and (
                r.waiting_signal == signal.name or control
            ):
                self._runs[key] = dataclasses.replace(
                    r, next_wake_at=signal.created_at, control_pending=r.control_pending or control
                )
            return True

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals, oldest first."""
        with self._lock:
            inbox = self._signals.get((tenant_id, run_id), {})
            pending = [s for s, consumed in inbox.values() if not consumed]
        return sorted(pending, key=lambda s: (s.created_at, s.signal_id))

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

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by key."""
        return {k: self._blobs[(tenant_id, k)] for k in keys if (tenant_id, k) in self._blobs}

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

    # -- schedules and intake -------------------------------------------------------------
    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create or update a schedule, keeping its pending tick when its timing is unchanged."""
        key = (schedule.tenant_id, schedule.name)
        with self._lock:
            old = self._schedules.get(key)
            new = schedule
            if old is not None:
                same = old.cron == schedule.cron and old.timezone == schedule.timezone
                new = dataclasses.replace(
                    schedule, created_at=old.created_at, last_fired_at=old.last_fired_at,
                    claimed_until=old.claimed_until,
                    next_fire_at=old.next_fire_at if same and old.enabled
                    else schedule.next_fire_at,
                )
            self._schedules[key] = new
            return new

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``."""
        return self._schedules.get((tenant_id, name))

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        with self._lock:
            return sorted(
                (s for s in self._schedules.values() if s.tenant_id == tenant_id),
                key=lambda s: s.name,
            )

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule."""
        with self._lock:
            return self._schedules.pop((tenant_id, name), None) is not None

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due, unclaimed schedules of ``flows``."""
        with self._lock:
            due = sorted(
                (
                    s for s in self._schedules.values()
                    if s.enabled and s.next_fire_at <= now and s.flow in flows
                    and (s.claimed_until is None or s.claimed_until < now)
                ),
                key=lambda s: (s.next_fire_at, s.tenant_id, s.name),
            )[:limit]
            claimed = [dataclasses.replace(s, claimed_until=until) for s in due]
            for s in claimed:
                self._schedules[(s.tenant_id, s.name)] = s
            return claimed

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """Move a schedule on from the tick ``expected``."""
        key = (tenant_id, name)
        with self._lock:
            s = self._schedules.get(key)
            if s is None or s.next_fire_at != expected:
                return False
            self._schedules[key] = dataclasses.replace(
                s, next_fire_at=next_fire_at, claimed_until=None,
                last_fired_at=s.last_fired_at if fired_at is None else fired_at,
            )
            return True

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """Earliest tick of an enabled, unclaimed schedule of ``flows``."""
        with self._lock:
            due = [
                s.next_fire_at for s in self._schedules.values()
                if s.enabled and s.flow in flows
                and (s.claimed_until is None or s.claimed_until < now)
            ]
        return min(due) if due else None

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Signal the entity's live owner or start its first run, once per key."""
        r = request
        with self._lock:
            seen = self._intake.get((r.tenant_id, r.idempotency_key))
            if seen is not None:
                return seen, False
            owner = self.entity_owner(r.tenant_id, r.entity_id)
            if owner is not None:
                self.send_signal(SignalRecord(
                    r.tenant_id, owner, r.idempotency_key, r.signal, r.payload, r.sender, r.now
                ))
                action, run_id = "signalled", owner
            elif r.new_run is not None:
                run, _ = self.create_run(r.new_run)
                self._owners[(r.tenant_id, r.entity_id)] = run.run_id
                action, run_id = "started", run.run_id
            else:
                return None, False
            record = IntakeRecord(
                r.tenant_id, r.idempotency_key, r.entity_id, r.event_type, action, run_id, r.now
            )
            self._intake[(r.tenant_id, r.idempotency_key)] = record
            return record, True

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """The record of the event with this key."""
        return self._intake.get((tenant_id, idempotency_key))

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The entity's owner while it is not finished."""
        with self._lock:
            run_id = self._owners.get((tenant_id, entity_id))
            run = None if run_id is None else self._runs.get((tenant_id, run_id))
            return run_id if run is not None and run.status not in FINAL else None

    # -- approvers and decision nonces ----------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register or replace an approver."""
        with self._lock:
            self._approvers[(rec.tenant_id, rec.approver_id)] = rec

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id."""
        return self._approvers.get((tenant_id, approver_id))

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id."""
        with self._lock:
            return sorted(
                (a for a in self._approvers.values() if a.tenant_id == tenant_id),
                key=lambda a: a.approver_id,
            )

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver that is not revoked yet."""
        with self._lock:
            rec = self._approvers.get((tenant_id, approver_id))
            if rec is None or rec.revoked_at is not None:
                return False
            self._approvers[(tenant_id, approver_id)] = dataclasses.replace(rec, revoked_at=at)
            return True

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """True the first time the nonce is used in the tenant (or again for the same run
        and request: a decision redelivered after a crash)."""
        with self._lock:
            owner = self._nonces.setdefault((tenant_id, nonce), (run_id, request_id))
            return owner == (run_id, request_id)

    def wakeups(self, *, name: str) -> Wakeups:
        """Nothing is pushed in memory: workers poll."""
        return Polling()

    def close(self) -> None:
        """Nothing to close."""
