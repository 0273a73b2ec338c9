"""The regional store (residency) over in-memory regions: every role of the store protocol
is routed by the regional store itself; a tenant's calls reach its region only; a tenant
with no region is refused before anything is stored; calls that name no tenant serve every
region; wake-ups from any region wake a worker."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from underway.apikeys import authenticate, issue_key
from underway.errors import ConfigurationError, FencedError, ResidencyError
from underway.store import AppendBatch, MemoryStore, NewRun, QueueConfig, Store, StoredEvent
from underway.store.base import ConsentRecord
from underway.store.regional import RegionalStore
from underway.store.wakeups import AnyOf, Polling

T0 = 1_000.0


def regional(default: str | None = None) -> tuple[RegionalStore, MemoryStore, MemoryStore]:
    india, europe = MemoryStore(), MemoryStore()
    for s in (india, europe):
        s.migrate()
    return RegionalStore({"in": india, "eu": europe},
                         tenants={"acme": "in", "globex": "eu"}, default=default), india, europe


def new(tenant: str, run_id: str) -> NewRun:
    return NewRun(tenant_id=tenant, run_id=run_id, flow="f", idempotency_key=None,
                  first_event=StoredEvent(1, "RunStarted", b"{}", "0" * 64), blobs={},
                  step="s",
                  now=T0, next_wake_at=T0, subject="s-1")


def test_every_method_of_the_store_protocol_is_routed_by_the_regional_store() -> None:
    wanted = {name for cls in Store.__mro__ if cls.__module__.startswith("underway.store")
              for name, member in vars(cls).items()
              if not name.startswith("_") and (callable(member) or isinstance(member, property))}
    # The regional store's own methods, and those of the parts it is made of.
    routed = {name for cls in RegionalStore.__mro__ if cls is not object
              for name in vars(cls)}
    missing = sorted(wanted - routed)
    assert not missing, f"RegionalStore does not route {missing}: add them to it"


def test_a_tenant_s_rows_go_to_its_region_only() -> None:
    store, india, europe = regional()
    store.create_run(new("acme", "r1"))
    store.create_run(new("globex", "r2"))
    store.record_consent(ConsentRecord("globex", "s-1", "marketing", "granted", None, "x", T0))
    assert [r.run_id for r in india.list_runs("acme")] == ["r1"]
    assert india.list_runs("globex") == [] and europe.list_runs("acme") == []
    assert [r.run_id for r in store.runs_of_subject("globex", "s-1")] == ["r2"]
    assert list(europe.current_consents("globex", "s-1")) == ["marketing"]
    assert india.consent_history("globex", "s-1") == []
    assert store.tenants() == ["acme", "globex"]
    assert [h[:2] for h in store.journal_heads()] == [("acme", "r1"), ("globex", "r2")]


def test_a_group_commit_writes_each_batch_in_its_tenant_s_region() -> None:
    store, india, europe = regional()
    batches = []
    for tenant, run_id in (("acme", "r1"), ("globex", "r2"), ("acme", "r3")):
        store.create_run(new(tenant, run_id))
        [lease] = store.claim(owner="w", now=T0, ttl=30, tenant_id=tenant, run_id=run_id)
        batches.append(AppendBatch(tenant, run_id, 1, lease.token,
                                   [StoredEvent(2, "StepStarted", b"{}", "2" * 64)], T0))
    stale = AppendBatch("globex", "r2", 1, 99, [StoredEvent(2, "StepStarted", b"{}", "0" * 64)],
                         T0)
    results = store.append_many([*batches, stale])
    assert results[:3] == [False, False, False] and isinstance(results[3], FencedError)
    assert [e.seq for e in india.load_events("acme", "r1")] == [1, 2]
    assert [e.seq for e in india.load_events("acme", "r3")] == [1, 2]
    assert [e.seq for e in europe.load_events("globex", "r2")] == [1, 2]
    assert europe.load_events("acme", "r1") == [] and india.load_events("globex", "r2") == []
    with pytest.raises(ResidencyError):
        store.append_many([AppendBatch("initech", "r9", 0, 1, [], T0)])


def test_a_tenant_without_a_region_is_refused_and_nothing_is_stored() -> None:
    store, india, europe = regional()
    with pytest.raises(ResidencyError, match="tenant 'initech' has no region"):
        store.create_run(new("initech", "r1"))
    with pytest.raises(ResidencyError):
        store.get_run("initech", "r1")
    assert india.tenants() == europe.tenants() == []
    with_default, india, _ = regional(default="in")
    with_default.create_run(new("initech", "r1"))
    assert india.tenants() == ["initech"]


def test_regions_named_must_exist() -> None:
    with pytest.raises(ConfigurationError, match="region 'us', which is not one of"):
        RegionalStore({"in": MemoryStore()}, tenants={"acme": "us"})
    with pytest.raises(ConfigurationError, match="default region 'us'"):
        RegionalStore({"in": MemoryStore()}, tenants={}, default="us")


def test_claims_serve_every_region_and_leases_go_back_to_theirs() -> None:
    store, india, europe = regional()
    store.set_queue(QueueConfig("default", max_concurrency=10))
    assert [q.name for q in india.list_queues()] == [q.name for q in europe.list_queues()] \
        == ["default"]
    store.create_run(new("acme", "r1"))
    store.create_run(new("globex", "r2"))
    assert store.next_due_at(now=T0) == T0
    leases = store.claim(owner="w", now=T0, ttl=30, limit=10)
    assert sorted(lease.run_id for lease in leases) == ["r1", "r2"]
    assert sorted(h[1] for h in store.held_leases(now=T0)) == ["r1", "r2"]
    for lease in leases:
        store.release(lease, retry_at=T0 + 5)
    assert india.held_leases(now=T0) == europe.held_leases(now=T0) == []
    assert store.next_wake_at() == T0 + 5


def test_an_eager_start_creates_and_leases_the_run_in_its_tenant_s_region() -> None:
    store, india, europe = regional()
    started = store.start_leased(new("globex", "r1"), owner="w", now=T0, ttl=30)
    assert started.created and started.lease is not None
    assert india.list_runs("globex") == []
    assert [(r.run_id, r.lease_owner) for r in europe.list_runs("globex")] == [("r1", "w")]
    with pytest.raises(ResidencyError):
        store.start_leased(new("initech", "r2"), owner="w", now=T0, ttl=30)


def test_an_api_key_is_found_in_whichever_region_keeps_it() -> None:
    store, india, europe = regional()
    issued = issue_key(store, tenant_id="globex", role="admin", now=T0)
    assert [k.key_id for k in europe.list_api_keys()] == [issued.record.key_id]
    assert india.list_api_keys() == []
    found = authenticate(store, issued.token)
    assert found is not None and found.tenant_id == "globex"


def test_every_public_method_is_documented() -> None:
    for name, member in vars(RegionalStore).items():
        if not name.startswith("_") and inspect.isfunction(member):
            assert member.__doc__, name


class Pushing:
    """A source of wake-ups that yields when told."""

    def __init__(self) -> None:
        self.told = asyncio.Event()
        self.announced: list[list[str]] = []

    @property
    def listening(self) -> bool:
        return True

    async def watch(self, queues: list[str] | None, *, retry: float):  # type: ignore[no-untyped-def]
        while True:
            await self.told.wait()
            self.told.clear()
            yield

    def announce(self, queues: list[str]) -> None:
        self.announced.append(queues)


def test_a_wake_up_from_any_region_wakes_the_worker() -> None:
    async def scenario() -> None:
        a, b = Pushing(), Pushing()
        both = AnyOf([a, b])
        assert both.listening
        assert not AnyOf([a, Polling()]).listening
        watch = both.watch(None, retry=0.1)
        b.told.set()
        await asyncio.wait_for(watch.__anext__(), 60)
        a.told.set()
        await asyncio.wait_for(watch.__anext__(), 60)
        await watch.aclose()
        both.announce(["q"])
        assert a.announced == b.announced == [["q"]]
        polling = AnyOf([Polling(), Polling()]).watch(None, retry=0.1)
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(polling.__anext__(), 60)

    asyncio.run(scenario())
