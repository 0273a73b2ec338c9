"""Opening a knowledge base from a URL or beside a store, and keeping it apart from runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import underway as uw
from underway.errors import ConfigurationError
from underway.knowledge import KnowledgeRecord, open_knowledge
from underway.store import MemoryStore, connect

T0 = 1_700_000_000.0
ON_DISK = ["sqlite_url", pytest.param("pg_url", marks=pytest.mark.postgres)]


def rec(text: str, id: str, tenant_id: str = "acme") -> KnowledgeRecord:
    return KnowledgeRecord(id=id, tenant_id=tenant_id, text=text, source="system",
                           created_at=T0)


def test_a_url_opens_a_migrated_knowledge_base(database_url: str) -> None:
    knowledge = open_knowledge(database_url)
    knowledge.put(rec("opened from a URL", "u"))
    assert knowledge.get("acme", "u") == rec("opened from a URL", "u")
    knowledge.close()


@pytest.mark.parametrize("url_fixture", ON_DISK)
def test_records_outlive_the_process_that_wrote_them(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    url = str(request.getfixturevalue(url_fixture))
    writer = open_knowledge(url)
    writer.put(rec("kept on disk", "d"))
    writer.close()
    store = connect(url)
    reader = open_knowledge(store)
    assert [h.record.id for h in reader.search("acme", "disk", roles=(), now=T0)] == ["d"]
    reader.close()
    assert store.list_runs("acme") == []  # closing the knowledge base left the store open
    store.close()


def test_every_knowledge_base_on_one_memory_store_shares_its_records() -> None:
    store = MemoryStore()
    store.migrate()
    open_knowledge(store).put(rec("shared in memory", "m"))
    assert open_knowledge(store).get("acme", "m") is not None
    assert open_knowledge(MemoryStore()).get("acme", "m") is None


@pytest.mark.parametrize("url_fixture", ON_DISK)
def test_a_store_without_the_knowledge_tables_is_refused_with_the_fix(
    url_fixture: str, request: pytest.FixtureRequest
) -> None:
    store = connect(str(request.getfixturevalue(url_fixture)), migrate=False)
    try:
        with pytest.raises(ConfigurationError, match="underway db migrate"):
            open_knowledge(store)
    finally:
        store.close()


def test_an_unknown_url_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unsupported database URL"):
        open_knowledge("mysql://localhost/kb")


class Empty(BaseModel):
    pass


def test_knowledge_lives_apart_from_run_state(database_url: str) -> None:
    store = connect(database_url)
    engine = uw.Engine(store, clock=uw.ManualClock(T0))
    flow = uw.Flow("quick", state=Empty)

    @flow.step
    async def only(ctx: uw.RunContext[Empty, Any]) -> Any:
        return ctx.done("ok")

    run_id, _ = engine.start(flow, tenant_id="acme")
    asyncio.run(uw.Runner(engine).run_until_complete(run_id, tenant_id="acme"))
    history = engine.journal.history("acme", run_id)
    knowledge = open_knowledge(store)
    knowledge.put(rec("a fact about acme", "f"))
    knowledge.put(rec("a fact about initech", "f", tenant_id="initech"))
    assert store.tenants() == ["acme"]  # knowledge alone makes no tenant of runs
    assert knowledge.delete("acme", "f")
    assert knowledge.purge_expired(T0 + 10**9) == 0
    assert engine.journal.history("acme", run_id) == history
    assert engine.state(run_id, tenant_id="acme").result == "ok"
    store.close()
