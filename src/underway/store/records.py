"""The records the store protocols exchange: runs, events, leases, signals, schedules,
intake, approvers, queue limits, API keys; and, from ``_privacy_records``, the access log,
consents, legal holds, retention's purges and sweeps. Plain frozen values; no behaviour
beyond checking their own fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigurationError
from ._privacy_records import (
    ERASURE_PREFIX,
    HOLD_KINDS,
    KEY_STATES,
    SEALED_KINDS,
    SUBJECT_SCOPE,
    VAULT_STATES,
    AccessHead,
    AccessRecord,
    ConsentRecord,
    DataKeyRecord,
    ErasureRecord,
    Forget,
    ForgottenRun,
    HoldRecord,
    SealedRow,
    SweepRecord,
    subject_scope,
)

__all__ = [
    "ERASURE_PREFIX",
    "FINAL",
    "HOLD_KINDS",
    "KEY_STATES",
    "SEALED_KINDS",
    "SUBJECT_SCOPE",
    "VAULT_STATES",
    "AccessHead",
    "AccessRecord",
    "ApiKeyRecord",
    "AppendBatch",
    "ApproverRecord",
    "CheckpointTail",
    "ConsentRecord",
    "DataKeyRecord",
    "ErasureRecord",
    "Forget",
    "ForgottenRun",
    "ForkLink",
    "HoldRecord",
    "IntakeRecord",
    "IntakeRequest",
    "IntakeSecretRecord",
    "Lease",
    "NewRun",
    "Purge",
    "PurgedRun",
    "QueueConfig",
    "RowRepair",
    "RunRecord",
    "RunUpdate",
    "ScheduleRecord",
    "SealedRow",
    "SignalRecord",
    "StartedRun",
    "StoredEvent",
    "StoredLabel",
    "SweepRecord",
    "subject_scope",
]

FINAL = ("completed", "failed", "cancelled")
"""The statuses a run ends in: a run with one of them never runs again."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as stored: its sequence number, type, stored bytes and chain hash."""

    seq: int
    type: str
    payload: bytes
    hash: str


@dataclass(frozen=True, slots=True)
class StoredLabel:
    """One label of a run as the index holds it: its name, its value as text (what a
    filter compares), the value's type (``str``, ``int``, ``float``, ``bool``) and whether
    it is sensitive (shown redacted to a viewer who may not reveal it)."""

    key: str
    value: str
    kind: str = "str"
    sensitive: bool = False


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
    subject: str | None = None
    """The data subject the run is about (None: it names none)."""
    purpose: str = "operations"
    """What the run is for."""
    request_kind: str | None = None
    """What the run waits for a person to do: ``approval``, ``question`` or ``resolution``
    (None: nothing). A projection of the journal, like the status; ``/metrics`` counts it."""


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """How an append changes the run's row."""

    status: str
    step: str | None
    next_wake_at: float | None
    waiting_signal: str | None = None
    error: str | None = None
    request_kind: str | None = None


@dataclass(frozen=True, slots=True)
class RowRepair:
    """A runs row rewritten from its journal (``underway.projection``), written only while
    the row is still as it was read: the same lease token, head and status."""

    tenant_id: str
    run_id: str
    seen: RunRecord
    """The row as read before the journal was folded."""
    head_seq: int
    head_hash: str
    update: RunUpdate
    """What the row should say."""
    clear_lease: bool = False
    """Drop a lease no live worker can hold."""
    token: int | None = None
    """Repair a run leased with this token (its holder repairs it and hands it back);
    None: a run nobody holds."""

    def params(self, now: float) -> dict[str, object]:
        """The named parameters of the ``repair_run`` statement (both dialects)."""
        u, seen = self.update, self.seen
        return {
            "tenant_id": self.tenant_id, "run_id": self.run_id, "head_seq": self.head_seq,
            "head_hash": self.head_hash, "status": u.status, "step": u.step,
            "wake": u.next_wake_at, "waiting_signal": u.waiting_signal, "error": u.error,
            "request_kind": u.request_kind, "clear": self.clear_lease, "token": self.token,
            "now": now,
            "seen_token": seen.lease_token, "seen_seq": seen.last_seq,
            "seen_status": seen.status,
        }


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
    subject: str | None = None
    """The data subject the run is about (kept on the run row: a legal hold on the
    subject holds the run)."""
    purpose: str = "operations"
    labels: tuple[StoredLabel, ...] = ()
    """The labels it starts with, written to the index with the run."""


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
    signals: list[SignalRecord] = field(default_factory=list)
    """Signals to other runs of the tenant, delivered in the append's transaction (a
    child's end to its parent, a cancel to the children of a cancelled run)."""
    labels: tuple[StoredLabel, ...] = ()
    """Labels the events set (``RunLabeled``), written to the index in the append's
    transaction: a label named again gets the new value."""


@dataclass(frozen=True, slots=True)
class ForkLink:
    """What forking a run writes to the parent, with the fork: ``event`` (a ``RunForked``,
    stored and chained from the parent's head) appended at ``expected_seq + 1`` — only if
    the parent's journal still ends at ``expected_seq`` and no worker holds its lease at
    ``now``."""

    tenant_id: str
    run_id: str
    expected_seq: int
    event: StoredEvent
    now: float


@dataclass(frozen=True, slots=True)
class CheckpointTail:
    """A run's checkpoint (its ``seq`` and stored ``state``) with the events from that seq
    on (``tail``, the first one the event the checkpoint is bound to), read together."""

    seq: int
    state: bytes
    tail: list[StoredEvent]


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to append to a run, proven by ``token`` until ``expires_at``."""

    tenant_id: str
    run_id: str
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class StartedRun:
    """What :meth:`~underway.store.leases.LeaseStore.start_leased` did: the run's row as
    the transaction left it, whether it created the run, and the lease it took (None: the
    run was not due, someone else held it, or its queue's limits said no)."""

    run: RunRecord
    created: bool
    lease: Lease | None
    inbox: bool
    """Whether unconsumed signals waited in the run's inbox when it was leased (a signal
    can be sent to a run not yet created: a cancel of a parent reaches a child whose start
    it overtook)."""


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


# -- underway serve: API keys, intake webhook secrets, the access log ----------------------
@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key of ``underway serve``: which ``tenant`` it acts in and with which
    ``role``. Only ``token_hash`` (the SHA-256 hex of the token) is kept, never the token.
    A revoked key (``revoked_at`` set) authenticates nothing."""

    key_id: str
    tenant_id: str
    role: str
    name: str
    token_hash: str
    created_at: float
    revoked_at: float | None = None


@dataclass(frozen=True, slots=True)
class IntakeSecretRecord:
    """The secret that signs webhook deliveries from ``source`` to ``tenant_id`` (HMAC-SHA256
    needs the secret itself, so it is stored as given)."""

    tenant_id: str
    source: str
    secret: str
    created_at: float


@dataclass(frozen=True, slots=True)
class PurgedRun:
    """The record of a run's purge: when, by which sweep, how many events, by which
    rule."""

    tenant_id: str
    run_id: str
    sweep_id: str
    purged_at: float
    events: int
    rule: str

    @property
    def erasure(self) -> str | None:
        """The reference of the erasure that purged the run (its ``sweep_id``), when the
        purge erased the run's data subject on request; None for a retention purge."""
        return self.sweep_id if self.sweep_id.startswith(ERASURE_PREFIX) else None


@dataclass(frozen=True, slots=True)
class Purge:
    """One run's purge, done in one transaction: each event's payload replaced by its
    tombstone (``tombstones``: seq, type, tombstone bytes and the event's unchanged hash,
    which the stored row must still carry), the run's checkpoints and signals deleted, its
    row's error and subject cleared, and the purge recorded (``sweep_id``, ``at``,
    ``rule``) — only if the run is still final and its journal still ends at
    ``last_seq``."""

    tenant_id: str
    run_id: str
    last_seq: int
    tombstones: list[StoredEvent]
    sweep_id: str
    at: float
    rule: str
