"""Residency: one database per region, and a store that sends each tenant's reads and
writes to its region's database only.

:class:`RegionalStore` is a :class:`~underway.store.base.Store` over several stores, one
per region (``in``, ``eu``...), and a map of tenant to region (with an optional default
region for tenants not listed). Every call that names a tenant — directly, or through the
run, batch, signal, lease or record it is given — goes to that tenant's region and no
other; a tenant with no region is refused with :class:`~underway.errors.ResidencyError`
before anything is read or written. So a client, ``underway serve`` and the CLI work on a
``RegionalStore`` as on one database, and every row of a tenant lands in its region.

Calls that name no tenant serve every region: a worker's claim takes due runs from each
region in turn (the leases it returns name their tenants, so renewing, appending and
releasing go back to the right region), listings of tenants, counts, heads and leases are
the union of the regions', due times are the earliest of them, wake-ups are heard from
every region, and a queue's limits are set in every region (each region enforces them on
its own runs). An API key lives in its tenant's region like everything else of the
tenant: a token is looked up in each region until one knows its key id (ids are random).
A circuit shared by all tenants (tenant ``*``) is kept in the default region, else the
first region by name.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..codec import Codec
from ..errors import ConfigurationError, ResidencyError
from .base import Dialect, Store
from .budgets import Outcome
from .journal import CHAIN_LIMIT, AppendResult
from .limits import SHARED
from .records import (
    AccessHead,
    AccessRecord,
    ApiKeyRecord,
    AppendBatch,
    ApproverRecord,
    CheckpointTail,
    ConsentRecord,
    ForkLink,
    IntakeRecord,
    IntakeRequest,
    IntakeSecretRecord,
    Lease,
    NewRun,
    QueueConfig,
    RowRepair,
    RunRecord,
    ScheduleRecord,
    SignalRecord,
    StartedRun,
    StoredEvent,
)
from .regions_keys import RegionalKeys
from .regions_retention import RegionalRetention
from .wakeups import AnyOf, Wakeups

__all__ = ["RegionalStore"]

class RegionalStore(RegionalRetention, RegionalKeys):
    """A :class:`~underway.store.base.Store` that keeps each tenant in its region's
    database (see the module docstring; holds and retention: :class:`RegionalRetention`;
    encryption's data keys: :class:`RegionalKeys`). ``codec``: how payloads read and
    written through it are encoded, sealed and opened (``underway.crypto.encrypt`` on the
    regional store seals them all, each tenant's data keys in its region).

    ``regions`` maps region names to their stores (opened and migrated by the caller; the
    regional store closes them); ``tenants`` maps tenant ids to region names; ``default``
    is the region of tenants not listed (None: such tenants are refused). Raises
    :class:`~underway.errors.ConfigurationError` when a tenant or the default names a
    region that is not given.
    """

    def __init__(
        self, regions: Mapping[str, Store], *, tenants: Mapping[str, str],
        default: str | None = None,
    ) -> None:
        if not regions:
            raise ConfigurationError("residency needs at least one region")
        for tenant, region in tenants.items():
            if region not in regions:
                raise ConfigurationError(
                    f"tenant {tenant!r} is in region {region!r}, which is not one of the "
                    f"regions ({', '.join(sorted(regions))})")
        if default is not None and default not in regions:
            raise ConfigurationError(f"the default region {default!r} is not one of the "
                                     f"regions ({', '.join(sorted(regions))})")
        self.regions: dict[str, Store] = dict(sorted(regions.items()))
        """The store of each region, by region name."""
        self.tenant_regions: dict[str, str] = dict(tenants)
        """The region of each listed tenant."""
        self.default = default
        """The region of tenants not listed (None: they are refused)."""
        self._turn = itertools.count()
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""

    # -- routing ----------------------------------------------------------------------
    def region_of(self, tenant_id: str) -> str:
        """The region ``tenant_id``'s data lives in; :class:`ResidencyError` when none."""
        region = self.tenant_regions.get(tenant_id, self.default)
        if region is None:
            raise ResidencyError(tenant_id, list(self.regions))
        return region

    def store_of(self, tenant_id: str) -> Store:
        """The store of ``tenant_id``'s region."""
        return self.regions[self.region_of(tenant_id)]

    def _shared(self) -> Store:
        return self.regions[self.default or next(iter(self.regions))]

    def _of(self, tenant_id: str) -> Store:
        return self._shared() if tenant_id == SHARED else self.store_of(tenant_id)

    def _all(self) -> Iterable[Store]:
        return self.regions.values()

    # -- the database -----------------------------------------------------------------
    @property
    def dialect(self) -> Dialect:
        """The first region's dialect (regions may differ; each uses its own SQL)."""
        return next(iter(self.regions.values())).dialect

    def migrate(self) -> int:
        """Migrate every region's database; the lowest version now in place."""
        return min(s.migrate() for s in self._all())

    def schema_version(self) -> int:
        """The lowest schema version of the regions' databases."""
        return min(s.schema_version() for s in self._all())

    def wakeups(self, *, name: str) -> Wakeups:
        """Wake-ups from every region."""
        return AnyOf([s.wakeups(name=f"{name} {region}")
                          for region, s in self.regions.items()])

    def close(self) -> None:
        """Close every region's store."""
        for s in self._all():
            s.close()

    # -- journal ----------------------------------------------------------------------
    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run in its tenant's region."""
        return self._of(new.tenant_id).create_run(new)

    def start_leased(
        self, new: NewRun, *, owner: str, now: float, ttl: float,
        queues: list[str] | None = None,
    ) -> StartedRun:
        """Create and lease the run in its tenant's region."""
        return self._of(new.tenant_id).start_leased(new, owner=owner, now=now, ttl=ttl,
                                                    queues=queues)

    def append(self, batch: AppendBatch) -> bool:
        """Append in the run's region (its signals go to runs of the same tenant)."""
        return self._of(batch.tenant_id).append(batch)

    def append_many(self, batches: Sequence[AppendBatch]) -> list[AppendResult]:
        """Append each region's batches together in that region's database."""
        by_region: dict[int, tuple[Store, list[int]]] = {}
        for i, batch in enumerate(batches):
            store = self._of(batch.tenant_id)
            by_region.setdefault(id(store), (store, []))[1].append(i)
        out: list[AppendResult] = [False] * len(batches)
        for store, indexes in by_region.values():
            for i, result in zip(
                indexes, store.append_many([batches[i] for i in indexes]), strict=True
            ):
                out[i] = result
        return out

    def fork_run(self, new: NewRun, link: ForkLink) -> RunRecord:
        """Fork a run in its tenant's region (a fork stays in its parent's tenant)."""
        if new.tenant_id != link.tenant_id:
            raise ConfigurationError(
                f"a fork stays in its parent's tenant: {new.tenant_id!r} is not "
                f"{link.tenant_id!r}")
        return self._of(link.tenant_id).fork_run(new, link)

    def load_checkpoints(
        self, tenant_id: str, run_ids: Sequence[str]
    ) -> dict[str, CheckpointTail]:
        """Checkpoints with their tails, from the tenant's region."""
        return self._of(tenant_id).load_checkpoints(tenant_id, run_ids)

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events, from the tenant's region."""
        return self._of(tenant_id).load_events(tenant_id, run_id, after_seq)

    def events_by_type(
        self, tenant_id: str, run_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[StoredEvent]]:
        """Events of some types, from the tenant's region."""
        return self._of(tenant_id).events_by_type(tenant_id, run_ids, types)

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The checkpoint, from the tenant's region."""
        return self._of(tenant_id).load_checkpoint(tenant_id, run_id)

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints in the tenant's region."""
        return self._of(tenant_id).delete_checkpoints(tenant_id, run_id)

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blobs, from the tenant's region."""
        return self._of(tenant_id).get_blobs(tenant_id, keys)

    def get_blob_chain(
        self, tenant_id: str, key: str, *, limit: int = CHAIN_LIMIT
    ) -> dict[str, bytes]:
        """A chain of blobs, from the tenant's region."""
        return self._of(tenant_id).get_blob_chain(tenant_id, key, limit=limit)

    # -- runs -------------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, from the tenant's region."""
        return self._of(tenant_id).get_run(tenant_id, run_id)

    def list_runs(self, tenant_id: str, **filters: Any) -> list[RunRecord]:
        """The tenant's runs, from its region."""
        return self._of(tenant_id).list_runs(tenant_id, **filters)

    def runs_of_subject(
        self, tenant_id: str, subject: str, *, limit: int | None = None
    ) -> list[RunRecord]:
        """The runs about a subject, from the tenant's region."""
        return self._of(tenant_id).runs_of_subject(tenant_id, subject, limit=limit)

    def tenants(self) -> list[str]:
        """Tenants with runs, in every region."""
        return sorted({t for s in self._all() for t in s.tenants()})

    def run_counts(self) -> list[tuple[str, str, int]]:
        """(tenant, status, count), of every region."""
        return sorted(c for s in self._all() for c in s.run_counts())

    def runs_created(
        self, tenant_id: str, *, since: float, until: float, width: float
    ) -> list[tuple[int, str, int]]:
        """Runs created per bucket, from the tenant's region."""
        return self._of(tenant_id).runs_created(tenant_id, since=since, until=until,
                                                width=width)

    def runs_written(self, tenant_id: str, *, since: float, until: float) -> list[str]:
        """Runs written in a window, from the tenant's region."""
        return self._of(tenant_id).runs_written(tenant_id, since=since, until=until)

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """Runs with a row or events: the tenant's region's, or every region's."""
        if tenant_id is not None:
            return self._of(tenant_id).journaled_runs(tenant_id)
        return sorted(r for s in self._all() for r in s.journaled_runs())

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """Heads of journals: the tenant's region's, or every region's."""
        if tenant_id is not None:
            return self._of(tenant_id).journal_heads(tenant_id)
        return sorted(h for s in self._all() for h in s.journal_heads())

    # -- leases -----------------------------------------------------------------------
    def claim(
        self, *, owner: str, now: float, ttl: float, limit: int = 1,
        tenant_id: str | None = None, run_id: str | None = None,
        queues: list[str] | None = None,
    ) -> list[Lease]:
        """Lease due runs: of the tenant, in its region; else from each region in turn,
        starting with the next region on each call, until ``limit`` are leased."""
        if tenant_id is not None:
            return self._of(tenant_id).claim(owner=owner, now=now, ttl=ttl, limit=limit,
                                             tenant_id=tenant_id, run_id=run_id,
                                             queues=queues)
        stores = list(self._all())
        first = next(self._turn) % len(stores)
        leases: list[Lease] = []
        for s in stores[first:] + stores[:first]:
            if len(leases) >= limit:
                break
            leases += s.claim(owner=owner, now=now, ttl=ttl, limit=limit - len(leases),
                              run_id=run_id, queues=queues)
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

    def suspect_runs(self, *, now: float, limit: int = 100) -> list[tuple[str, str]]:
        """Suspect rows of every region."""
        return sorted(r for s in self._all() for r in s.suspect_runs(now=now, limit=limit))[
            :limit]

    def repair_run(self, repair: RowRepair, *, now: float) -> bool:
        """Repair in the run's region."""
        return self._of(repair.tenant_id).repair_run(repair, now=now)

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """The earliest due time of every region."""
        return _earliest(s.next_due_at(now=now, queues=queues) for s in self._all())

    def next_wake_at(self) -> float | None:
        """The earliest wake time of every region."""
        return _earliest(s.next_wake_at() for s in self._all())

    # -- inbox ------------------------------------------------------------------------
    def send_signal(self, signal: SignalRecord) -> bool:
        """Deliver in the run's region."""
        return self._of(signal.tenant_id).send_signal(signal)

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """A run's inbox, from the tenant's region."""
        return self._of(tenant_id).pending_signals(tenant_id, run_id)

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a nonce in the tenant's region."""
        return self._of(tenant_id).use_nonce(tenant_id, nonce, run_id=run_id,
                                             request_id=request_id, at=at)

    # -- schedules and intake -----------------------------------------------------------
    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Store a schedule in its tenant's region."""
        return self._of(schedule.tenant_id).put_schedule(schedule)

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """A schedule, from the tenant's region."""
        return self._of(tenant_id).get_schedule(tenant_id, name)

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """The tenant's schedules, from its region."""
        return self._of(tenant_id).list_schedules(tenant_id)

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule in the tenant's region."""
        return self._of(tenant_id).delete_schedule(tenant_id, name)

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Claim due schedules from each region, earliest first overall."""
        found: list[ScheduleRecord] = []
        for s in self._all():
            if len(found) >= limit:
                break
            found += s.claim_schedules(now=now, until=until, flows=flows,
                                       limit=limit - len(found))
        return sorted(found, key=lambda r: (r.next_fire_at, r.tenant_id, r.name))

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """End a schedule's claim in the tenant's region."""
        return self._of(tenant_id).advance_schedule(
            tenant_id, name, expected=expected, next_fire_at=next_fire_at, fired_at=fired_at)

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """The earliest schedule of every region."""
        return _earliest(s.next_schedule_at(now=now, flows=flows) for s in self._all())

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Act on an outside event in its tenant's region."""
        return self._of(request.tenant_id).apply_intake(request)

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """An intake record, from the tenant's region."""
        return self._of(tenant_id).get_intake(tenant_id, idempotency_key)

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """An entity's owner, from the tenant's region."""
        return self._of(tenant_id).entity_owner(tenant_id, entity_id)

    # -- approvers, queues, circuits ------------------------------------------------------
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

    # -- budget ledger ------------------------------------------------------------------
    def reserve_budget(
        self, tenant_id: str, since: float, key: str, amounts: Mapping[str, float],
        limits: Mapping[str, float], *, baseline: Mapping[str, float] | None = None,
    ) -> Outcome:
        """Reserve against the tenant's budget in its region."""
        return self._of(tenant_id).reserve_budget(tenant_id, since, key, amounts, limits,
                                                  baseline=baseline)

    def settle_budget(self, tenant_id: str, key: str, amounts: Mapping[str, float]) -> None:
        """Settle a call's hold in the tenant's region."""
        self._of(tenant_id).settle_budget(tenant_id, key, amounts)

    def budget_used(self, tenant_id: str, since: float) -> dict[str, float] | None:
        """What the tenant's day holds, from its region."""
        return self._of(tenant_id).budget_used(tenant_id, since)

    # -- API keys, webhook secrets, the access log, consent ----------------------------
    def put_api_key(self, rec: ApiKeyRecord) -> None:
        """Store a key in its tenant's region."""
        self._of(rec.tenant_id).put_api_key(rec)

    def get_api_key(self, key_id: str) -> ApiKeyRecord | None:
        """The key, from whichever region knows its id."""
        for s in self._all():
            found = s.get_api_key(key_id)
            if found is not None:
                return found
        return None

    def list_api_keys(self, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Keys of the tenant (from its region), or of every region."""
        if tenant_id is not None:
            return self._of(tenant_id).list_api_keys(tenant_id)
        return sorted((k for s in self._all() for k in s.list_api_keys()),
                      key=lambda k: (k.created_at, k.key_id))

    def revoke_api_key(self, tenant_id: str, key_id: str, *, at: float) -> bool:
        """Revoke a key in the tenant's region."""
        return self._of(tenant_id).revoke_api_key(tenant_id, key_id, at=at)

    def put_intake_secret(self, rec: IntakeSecretRecord) -> None:
        """Set a webhook secret in its tenant's region."""
        self._of(rec.tenant_id).put_intake_secret(rec)

    def get_intake_secret(self, tenant_id: str, source: str) -> IntakeSecretRecord | None:
        """A webhook secret, from the tenant's region."""
        return self._of(tenant_id).get_intake_secret(tenant_id, source)

    def list_intake_secrets(self, tenant_id: str) -> list[IntakeSecretRecord]:
        """The tenant's webhook secrets, from its region."""
        return self._of(tenant_id).list_intake_secrets(tenant_id)

    def delete_intake_secret(self, tenant_id: str, source: str) -> bool:
        """Remove a webhook secret in the tenant's region."""
        return self._of(tenant_id).delete_intake_secret(tenant_id, source)

    def log_access(self, records: Sequence[AccessRecord]) -> list[AccessRecord]:
        """Append each tenant's entries to its region's log (and its chain there); the
        stored entries, in the order given."""
        by_region: dict[str, list[AccessRecord]] = {}
        for rec in records:
            by_region.setdefault(self.region_of(rec.tenant_id), []).append(rec)
        stored: dict[int, AccessRecord] = {}
        for region, found in by_region.items():
            for rec, kept in zip(found, self.regions[region].log_access(found), strict=True):
                stored[id(rec)] = kept
        return [stored[id(rec)] for rec in records]

    def access_chain(self, tenant_id: str, *, after: int = 0,
                     limit: int = 1000) -> list[AccessRecord]:
        """The tenant's chained entries, from its region."""
        return self._of(tenant_id).access_chain(tenant_id, after=after, limit=limit)

    def access_head(self, tenant_id: str) -> AccessHead | None:
        """The end of the tenant's chain, in its region."""
        return self._of(tenant_id).access_head(tenant_id)

    def list_access(self, tenant_id: str, **filters: Any) -> list[AccessRecord]:
        """The tenant's access log, from its region."""
        return self._of(tenant_id).list_access(tenant_id, **filters)

    def record_consent(self, rec: ConsentRecord) -> ConsentRecord:
        """Record a consent change in its tenant's region."""
        return self._of(rec.tenant_id).record_consent(rec)

    def current_consents(
        self, tenant_id: str, subject: str, purposes: Sequence[str] | None = None
    ) -> dict[str, ConsentRecord]:
        """Where a subject's consent stands, from the tenant's region."""
        return self._of(tenant_id).current_consents(tenant_id, subject, purposes)

    def consent_history(
        self, tenant_id: str, subject: str, *, purpose: str | None = None
    ) -> list[ConsentRecord]:
        """A subject's consent records, from the tenant's region."""
        return self._of(tenant_id).consent_history(tenant_id, subject, purpose=purpose)


def _earliest(times: Iterable[float | None]) -> float | None:
    found = [t for t in times if t is not None]
    return min(found) if found else None


def _check(store: RegionalStore) -> Store:
    return store  # mypy: a RegionalStore is a Store, every role of it
