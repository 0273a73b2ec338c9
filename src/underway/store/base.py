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
        self, tenant_id: str, *, status: str | None = None, limit: int = 100
    ) -> list[RunRecord]:
        """Runs of a tenant, newest first, optionally with one status."""
        ...

    def tenants(self) -> list[str]:
        """Every tenant that has runs."""
        ...

    def journaled_runs(self, tenant_id: str | None = None) -> list[tuple[str, str]]:
        """(tenant, run) of every run with a row or with events, in order — what an audit
        must visit, including a journal whose run row was deleted."""
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
    ) -> list[Lease]:
        """Lease up to ``limit`` runs that are due and not leased by anyone else."""
        ...

    def renew(self, lease: Lease, *, now: float, ttl: float) -> Lease | None:
        """Extend a lease still held; None when it was lost."""
        ...

    def release(self, lease: Lease) -> None:
        """Give a lease back without appending."""
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

    def close(self) -> None:
        """Release connections."""
        ...
