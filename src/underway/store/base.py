"""The storage protocol every backend implements, and the records it exchanges.

The protocol is deliberately narrow: runs, their append-only events, one checkpoint per
run, content-addressed blobs, and an inbox of signals. Every method takes the tenant.
Appends are atomic: events, blobs, checkpoint and (when given) the run row change in one
transaction, which commits only if the run's journal still ends at ``expected_seq`` and the
writer's lease token is still current (fencing). The journal itself is the sequence check:
the run row is a projection, written when a run changes status or is handed back, not on
every step, so a step's commit writes little more than its events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ConfigurationError

FINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as stored: its sequence number, type, stored bytes and chain hash."""

    seq: int
    type: str
    payload: bytes
    hash: str


@dataclass(frozen=True, slots=True)
class RunRecord:
    """The run's row: a projection of its journal plus scheduling and lease fields.

    ``last_seq``/``last_hash``, ``status`` and ``step`` are as of the last append that
    carried a :class:`RunUpdate` — at the latest, when the run was last handed back. While a
    worker holds the run, its journal may be ahead of them.
    """

    tenant_id: str
    run_id: str
    flow: str
    status: str
    step: str | None
    idempotency_key: str | None
    last_seq: int
    last_hash: str
    next_wake_at: float | None
    waiting_signal: str | None
    control_pending: bool
    lease_owner: str | None
    lease_token: int
    lease_expires_at: float | None
    created_at: float
    updated_at: float
    error: str | None
    queue: str = "default"


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """How an append changes the run's row."""

    status: str
    step: str | None
    next_wake_at: float | None
    waiting_signal: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create together with its first event."""

    tenant_id: str
    run_id: str
    flow: str
    idempotency_key: str | None
    first_event: StoredEvent
    blobs: dict[str, bytes]
    step: str
    now: float
    next_wake_at: float
    queue: str = "default"


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Events (and what travels with them) to append atomically to one run."""

    tenant_id: str
    run_id: str
    expected_seq: int
    fence: int
    events: list[StoredEvent]
    now: float
    update: RunUpdate | None = None
    blobs: dict[str, bytes] = field(default_factory=dict)
    checkpoint: tuple[int, bytes] | None = None
    consumed_signals: list[str] = field(default_factory=list)
    release: bool = False


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to append to a run, proven by ``token`` until ``expires_at``."""

    tenant_id: str
    run_id: str
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class SignalRecord:
    """A signal waiting in a run's inbox."""

    tenant_id: str
    run_id: str
    signal_id: str
    name: str
    payload: bytes
    sender: str | None
    created_at: float


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Limits of one named queue, enforced when runs are claimed (``None``: no limit).

    ``max_concurrency``: at most this many runs of the queue leased at once, across all
    workers (0 pauses the queue). ``rate_limit``: at most this many runs *started* (their
    first activation) per ``rate_period_s`` seconds, as a token bucket that holds
    ``rate_limit`` tokens and refills continuously; ``per_tenant`` gives every tenant a
    bucket of its own instead of one shared by the queue.
    """

    name: str
    max_concurrency: int | None = None
    rate_limit: int | None = None
    rate_period_s: float = 1.0
    per_tenant: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigurationError("a queue needs a name")
        if self.max_concurrency is not None and self.max_concurrency < 0:
            raise ConfigurationError(
                f"queue {self.name!r}: max_concurrency must be 0 or more, "
                f"not {self.max_concurrency}"
            )
        if self.rate_limit is not None and self.rate_limit < 0:
            raise ConfigurationError(
                f"queue {self.name!r}: rate_limit must be 0 or more, not {self.rate_limit}"
            )
        if not self.rate_period_s > 0:
            raise ConfigurationError(
                f"queue {self.name!r}: rate_period_s must be positive, not {self.rate_period_s}"
            )
        if self.per_tenant and self.rate_limit is None:
            raise ConfigurationError(
                f"queue {self.name!r}: per_tenant applies to a rate limit; give rate_limit too"
            )


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A cron schedule as stored: which flow to start, when, with what input.

    ``input`` is the canonical JSON of the runs' input. ``next_fire_at`` is the next tick
    not yet started (epoch seconds); ``claimed_until`` is set while a scheduler starts a
    tick, so others skip the schedule until then.
    """

    tenant_id: str
    name: str
    flow: str
    cron: str
    timezone: str
    input: bytes
    queue: str
    next_fire_at: float
    enabled: bool
    created_at: float
    last_fired_at: float | None = None
    claimed_until: float | None = None


@dataclass(frozen=True, slots=True)
class IntakeRecord:
    """What one outside event (by tenant and idempotency key) did: ``started`` or
    ``signalled`` run ``run_id``."""

    tenant_id: str
    idempotency_key: str
    entity_id: str
    event_type: str
    action: str
    run_id: str
    created_at: float


@dataclass(frozen=True, slots=True)
class IntakeRequest:
    """An outside event to act on once: signal the live run that owns its entity (signal
    ``signal`` with ``payload``, its id the idempotency key), else create ``new_run`` and
    make it the owner (None: only an owner may receive the event)."""

    tenant_id: str
    idempotency_key: str
    entity_id: str
    event_type: str
    now: float
    signal: str
    payload: bytes
    sender: str | None
    new_run: NewRun | None = None


# -- approvers (signed human approvals) ----------------------------------------------------
@dataclass(frozen=True, slots=True)
class ApproverRecord:
    """A person registered in a tenant to sign approval decisions.

    ``public_key`` is the base64 of the raw 32-byte Ed25519 public key; ``roles`` are what
    a request may require of its approver. A revoked approver (``revoked_at`` set) can sign
    nothing that is accepted until registered again.
    """

    tenant_id: str
    approver_id: str
    public_key: str
    roles: tuple[str, ...]
    created_at: float
    revoked_at: float | None = None


class Store(Protocol):
    """What the engine needs from a database. See the module docstring for the rules."""

    def migrate(self) -> int:
        """Apply pending migrations; return the schema version now in place."""
        ...

    def schema_version(self) -> int:
        """The highest migration applied (0 for an empty database)."""
        ...

    def create_run(self, new: NewRun) -> tuple[RunRecord, bool]:
        """Create the run, or return the existing one with the same idempotency key.

        The boolean is True when this call created the run.
        """
        ...

    def append(self, batch: AppendBatch) -> bool:
        """Append atomically; raise ConflictError or FencedError and change nothing if
        the run moved past ``expected_seq`` or the lease token is stale.

        Returns True when control signals (``underway.*``: cancel, resolve) wait in the
        run's inbox, so the engine looks at the inbox only when there is something there.
        """
        ...

    def load_events(self, tenant_id: str, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
        """Events with ``seq > after_seq`` in order."""
        ...

    def load_checkpoint(self, tenant_id: str, run_id: str) -> tuple[int, bytes] | None:
        """The latest checkpoint (its sequence number and bytes), if any."""
        ...

    def delete_checkpoints(self, tenant_id: str, run_id: str | None = None) -> int:
        """Drop checkpoints (they are caches); return how many were removed."""
        ...

    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, if it exists."""
        ...

    def list_runs(
        self, tenant_id: str, *, status: str | None = None, limit: int = 100,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        after: tuple[float, str] | None = None, id_prefix: str | None = None,
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first (``created_at`` descending, then run id), at most
        ``limit``: only those with ``status``, of ``flow``, created at or after ``since``
        and before ``until``, whose id starts with ``id_prefix``. ``after`` is the
        ``(created_at, run_id)`` of the last run of the previous page: the page goes on
        from there, unchanged by runs created meanwhile."""
        ...

    def tenants(self) -> list[str]:
        """Every tenant that has runs."""
        ...

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """(tenant, run) of every run with a row or with events, in order — what an audit
        must visit, including a journal whose run row was deleted."""
        ...

    def journal_heads(self, tenant_id: str | None = None) -> list[tuple[str, str, int, str]]:
        """(tenant, run, seq, hash) of the last event of every run with events (of
        ``tenant_id``, or of every tenant when None), sorted by tenant and run."""
        ...

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

        The queues' limits (:class:`QueueConfig`) hold in the same transaction: a queue at
        its ``max_concurrency`` yields nothing, and a run's first activation takes a token
        from its rate bucket or waits. Runs are taken round-robin across tenants (each
        tenant's earliest due run, then each tenant's second, ..., where a tenant's runs
        already leased count as turns it has had), so one tenant's backlog cannot starve
        another.
        """
        ...

    def next_due_at(self, *, now: float, queues: list[str] | None = None) -> float | None:
        """The earliest ``next_wake_at`` of an unfinished run of ``queues`` (every queue
        when None) that no unexpired lease holds; at or before ``now`` when one is due."""
        ...

    def set_queue(self, config: QueueConfig) -> None:
        """Create or replace a queue's limits (its rate buckets start full again)."""
        ...

    def list_queues(self) -> list[QueueConfig]:
        """Every configured queue, by name."""
        ...

    def delete_queue(self, name: str) -> bool:
        """Remove a queue's limits; False when it had none."""
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

    def next_wake_at(self) -> float | None:
        """The earliest time any unfinished, unleased run becomes due."""
        ...

    def send_signal(self, signal: SignalRecord) -> bool:
        """Put a signal in the run's inbox (once per signal_id) and wake the run if it
        waits for it. Returns False for a duplicate signal_id."""
        ...

    def pending_signals(self, tenant_id: str, run_id: str) -> list[SignalRecord]:
        """Unconsumed signals of a run, oldest first."""
        ...

    def get_blobs(self, tenant_id: str, keys: list[str]) -> dict[str, bytes]:
        """Blob bytes by content hash."""
        ...

    def circuit_admit(self, tenant_id: str, name: str, *, now: float, cooldown: float) -> str:
        """May a call through circuit ``name`` proceed? ``closed``: yes; ``open``: no, fail
        fast; ``trial``: yes, as the one half-open trial (others see ``open`` until it is
        recorded or ``cooldown`` passes). ``tenant_id`` is ``*`` for a shared circuit."""
        ...

    def circuit_record(
        self, tenant_id: str, name: str, *, ok: bool, now: float, threshold: int,
        cooldown: float,
    ) -> None:
        """Record a call's outcome: success closes the circuit; the ``threshold``-th
        consecutive failure, or a failed trial, opens it for ``cooldown`` seconds."""
        ...

    # -- schedules and intake -------------------------------------------------------------
    def put_schedule(self, schedule: ScheduleRecord) -> ScheduleRecord:
        """Create the schedule, or update the one with its tenant and name, and return it.

        An update keeps the pending tick (``next_fire_at``), ``created_at`` and
        ``last_fired_at`` when the cron expression and time zone are unchanged and the
        schedule was enabled; otherwise ``next_fire_at`` is taken from ``schedule``.
        """
        ...

    def get_schedule(self, tenant_id: str, name: str) -> ScheduleRecord | None:
        """The schedule called ``name``, if any."""
        ...

    def list_schedules(self, tenant_id: str) -> list[ScheduleRecord]:
        """A tenant's schedules by name."""
        ...

    def delete_schedule(self, tenant_id: str, name: str) -> bool:
        """Remove a schedule; False when there was none."""
        ...

    def claim_schedules(
        self, *, now: float, until: float, flows: list[str], limit: int
    ) -> list[ScheduleRecord]:
        """Atomically claim up to ``limit`` enabled schedules of ``flows`` (any tenant) whose
        ``next_fire_at`` is at or before ``now`` and that nobody else has claimed (or whose
        claim ended): mark them claimed until ``until`` and return them, earliest first."""
        ...

    def advance_schedule(
        self, tenant_id: str, name: str, *, expected: float, next_fire_at: float,
        fired_at: float | None,
    ) -> bool:
        """End a claim: set ``next_fire_at`` (and ``last_fired_at`` unless ``fired_at`` is
        None) only if the schedule still waits for the tick ``expected``; True if it did."""
        ...

    def next_schedule_at(self, *, now: float, flows: list[str]) -> float | None:
        """The earliest ``next_fire_at`` of an enabled, unclaimed schedule of ``flows``."""
        ...

    def apply_intake(self, request: IntakeRequest) -> tuple[IntakeRecord | None, bool]:
        """Act on an outside event once per (tenant, idempotency key), in one transaction.

        When the key was seen before, return its record and False. Otherwise, if a run that
        is not finished owns the entity, deliver the signal to it; else create
        ``request.new_run`` (or find the run with its idempotency key) and record it as the
        entity's owner. The record is written with the effect and returned with True.
        Returns (None, False) and writes nothing when no live run owns the entity and
        ``new_run`` is None. Events for one entity are serialized.
        """
        ...

    def get_intake(self, tenant_id: str, idempotency_key: str) -> IntakeRecord | None:
        """What the event with this idempotency key did, if it was acted on."""
        ...

    def entity_owner(self, tenant_id: str, entity_id: str) -> str | None:
        """The run that owns the entity, if it is not finished."""
        ...

    # -- approvers and decision nonces ----------------------------------------------------
    def put_approver(self, rec: ApproverRecord) -> None:
        """Register an approver, or replace the one with its tenant and id (its key, roles
        and creation time; registering again lifts a revocation)."""
        ...

    def get_approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver with this id in the tenant, revoked or not."""
        ...

    def list_approvers(self, tenant_id: str) -> list[ApproverRecord]:
        """A tenant's approvers by id, revoked ones included."""
        ...

    def revoke_approver(self, tenant_id: str, approver_id: str, *, at: float) -> bool:
        """Revoke an approver as of ``at``; False when there is no such approver or it was
        already revoked (the first revocation's time stands)."""
        ...

    def use_nonce(
        self, tenant_id: str, nonce: str, *, run_id: str, request_id: str, at: float
    ) -> bool:
        """Record a decision's nonce as used: True the first time the nonce is seen in the
        tenant, False ever after — except for the same ``run_id`` and ``request_id``, so a
        decision redelivered after a crash (nonce recorded, grant not yet journaled) is not
        mistaken for a replay. Atomic: of concurrent callers for different requests,
        exactly one gets True."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
