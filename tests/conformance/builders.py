"""Records and races the conformance suites build their cases from."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from underway.errors import ConflictError, FencedError
from underway.store import (
    AppendBatch,
    Lease,
    NewRun,
    RunRecord,
    RunUpdate,
    SignalRecord,
    Store,
    StoredEvent,
)

T0 = 1_000.0
ROUNDS = 10


def fake_hash(label: str) -> str:
    """A chain hash for a test event, named by ``label`` (stores keep 64 hex digits)."""
    return hashlib.sha256(label.encode()).hexdigest()


def event(seq: int, run_id: str = "r1", kind: str = "StepCompleted") -> StoredEvent:
    return StoredEvent(seq, kind, f'{{"seq":{seq},"run":"{run_id}"}}'.encode(),
                       fake_hash(f"{run_id}{seq}"))


def create(
    store: Store,
    run_id: str = "r1",
    *,
    tenant: str = "t1",
    key: str | None = None,
    flow: str = "f",
    now: float = T0,
    wake: float = T0,
    blobs: dict[str, bytes] | None = None,
) -> tuple[RunRecord, bool]:
    return store.create_run(NewRun(
        tenant_id=tenant, run_id=run_id, flow=flow, idempotency_key=key,
        first_event=event(1, run_id, "RunStarted"), blobs=blobs or {}, step="start", now=now,
        next_wake_at=wake,
    ))


def lease_of(
    store: Store, run_id: str = "r1", *, tenant: str = "t1", owner: str = "w1",
    now: float = T0, ttl: float = 30.0,
) -> Lease:
    leases = store.claim(owner=owner, now=now, ttl=ttl, tenant_id=tenant, run_id=run_id)
    assert len(leases) == 1, f"{run_id} was not claimable"
    return leases[0]


def batch(
    lease: Lease,
    after: int,
    *,
    count: int = 1,
    update: RunUpdate | None = None,
    now: float = T0 + 1,
    blobs: dict[str, bytes] | None = None,
    checkpoint: tuple[int, bytes] | None = None,
    consumed: list[str] | None = None,
    release: bool = False,
    expected: int | None = None,
    fence: int | None = None,
) -> AppendBatch:
    return AppendBatch(
        tenant_id=lease.tenant_id, run_id=lease.run_id,
        expected_seq=after if expected is None else expected,
        fence=lease.token if fence is None else fence,
        events=[event(after + i + 1, lease.run_id) for i in range(count)], now=now,
        update=update or RunUpdate("ready", "next", now),
        blobs=blobs or {}, checkpoint=checkpoint, consumed_signals=consumed or [],
        release=release,
    )


def signal(
    name: str, signal_id: str, *, run_id: str = "r1", tenant: str = "t1", at: float = T0 + 5
) -> SignalRecord:
    return SignalRecord(tenant, run_id, signal_id, name, b'{"ok":true}', "tester", at)


def seqs(store: Store, run_id: str = "r1", tenant: str = "t1") -> list[int]:
    return [e.seq for e in store.load_events(tenant, run_id)]


WAIT_GO = RunUpdate("waiting", "after", None, "go")


def start(
    store: Store, run_id: str, *, queue: str = "default", tenant: str = "t1", due: float = T0
) -> None:
    store.create_run(NewRun(
        tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=None,
        first_event=StoredEvent(1, "RunStarted", b"{}", fake_hash(f"{tenant}{run_id}")), blobs={},
        step="s", now=T0, next_wake_at=due, queue=queue,
    ))


def claim(
    store: Store, *, owner: str = "w", now: float = T0, limit: int = 100,
    queues: list[str] | None = None, ttl: float = 30.0,
) -> list[Lease]:
    return store.claim(owner=owner, now=now, ttl=ttl, limit=limit, queues=queues)


def ids(leases: list[Lease]) -> list[str]:
    return [lease.run_id for lease in leases]


def race(*attempts: Callable[[], Any]) -> list[Any]:
    """Run each attempt on its own thread, released together; an exception is a result."""
    gate = threading.Barrier(len(attempts))

    def go(attempt: Callable[[], Any]) -> Any:
        gate.wait()
        try:
            return attempt()
        except (ConflictError, FencedError) as exc:
            return exc

    with ThreadPoolExecutor(len(attempts)) as pool:
        return list(pool.map(go, attempts))


def append(
    store: Store, run_id: str, seq: int, token: int, writer: str,
    update: RunUpdate | None = None,
) -> Callable[[], bool]:
    return lambda: store.append(AppendBatch(
        tenant_id="t1", run_id=run_id, expected_seq=seq - 1, fence=token,
        events=[StoredEvent(seq, "StepCompleted", writer.encode(), fake_hash(f"{writer}{seq}"))],
        now=T0 + seq, update=update or RunUpdate("ready", "s", T0 + seq),
        blobs={f"blob-{writer}-{seq}": writer.encode()}, checkpoint=(seq, writer.encode()),
    ))
