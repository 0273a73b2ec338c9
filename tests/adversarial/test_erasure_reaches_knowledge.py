"""Invariant: an erasure reaches every copy of the subject's data. Knowledge written from a
run about a data subject — by the stock ``remember_tool``, by a tool of the application, by
a step calling the knowledge base directly or on the store's I/O threads, by a child run —
carries the subject and is sealed under its key. Erasing the subject deletes and counts
it; search, recall and get find nothing of it afterwards, nor does a backup taken before;
another subject's knowledge stays. An erased run's timeline says it was erased on request,
with the erasure's reference. On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app as cli
from underway.codec import box_of
from underway.crypto import KeyringFile, encrypt
from underway.crypto._box import box_key_id
from underway.effects import CallInfo
from underway.errors import ConfigurationError
from underway.knowledge import KnowledgeRecord, open_knowledge, recall_tool, remember_tool
from underway.privacy.erasure import erase_subject
from underway.store import Store, connect
from underway.store._offload import run_io

TENANT = "acme"
ERASED, KEPT = "cust-1", "cust-2"
WORD = "zebrafinch"
"""The word every record holds, so one search would find them all."""


class Notes(BaseModel):
    recalled: list[str] = []


def flows(store: Store) -> tuple[list[Any], list[Any]]:
    kb = open_knowledge(store)
    remember = remember_tool(kb)
    recall = recall_tool(kb)

    @uw.tool(mutating=True, idempotent=True)
    def note(args: dict[str, Any], info: CallInfo) -> dict[str, Any]:
        kb.put(KnowledgeRecord(id=f"tool-{info.run_id}", tenant_id=info.tenant_id,
                               text=f"{WORD} by the app's tool", source="tool:note",
                               created_at=1.0))
        return {}

    child = uw.Flow("child", state=Notes)

    @child.step(start=True)
    async def write(ctx: uw.RunContext[Notes, Any]) -> Any:
        kb.put(KnowledgeRecord(id=f"child-{ctx.run_id}", tenant_id=TENANT,
                               text=f"{WORD} by a child", source="step", created_at=1.0))
        return ctx.done({})

    main = uw.Flow("main", state=Notes)

    @main.step(start=True)
    async def first(ctx: uw.RunContext[Notes, Any]) -> Any:
        await ctx.call(remember, {"text": f"{WORD} remembered for {ctx.run_id}"})
        await ctx.call(note, {})
        kb.put(KnowledgeRecord(id=f"step-{ctx.run_id}", tenant_id=TENANT,
                               text=f"{WORD} by the step", source="step", created_at=1.0))
        await run_io(kb, kb.put, KnowledgeRecord(
            id=f"io-{ctx.run_id}", tenant_id=TENANT, text=f"{WORD} on an I/O thread",
            source="step", created_at=1.0))
        found = await ctx.call(recall, {"query": WORD, "limit": 50})
        ctx.state.recalled = [h["id"] for h in found]
        await ctx.start(child, None, key="c")
        return ctx.done({})

    return [main, child], [remember, recall, note]


def drive(store: Store) -> None:
    fl, tools = flows(store)
    asyncio.run(uw.Runner(uw.Engine(store, flows=fl, tools=tools)).run_until_idle())


def readable(store: Store) -> list[KnowledgeRecord]:
    """What a search of the tenant finds, opened."""
    kb = open_knowledge(store)
    return [h.record for h in kb.search(TENANT, WORD, roles=(), now=2.0, limit=100)]


@pytest.fixture
def encrypted(db_url: str, tmp_path: Path) -> tuple[Store, Path]:
    keyring = tmp_path / "underway.keyring"
    KeyringFile.create(keyring)
    store = connect(db_url)
    encrypt(store, KeyringFile(keyring))
    return store, keyring


def test_knowledge_from_a_subjects_run_is_the_subjects_and_erasure_reaches_it(
    encrypted: tuple[Store, Path], db_url: str, tmp_path: Path
) -> None:
    store, keyring = encrypted
    engine = uw.Engine(store, flows=flows(store)[0])
    erased, _ = engine.start("main", tenant_id=TENANT, subject=ERASED)
    kept, _ = engine.start("main", tenant_id=TENANT, subject=KEPT)
    drive(store)
    assert store.get_run(TENANT, erased).status == "completed"  # type: ignore[union-attr]
    found = readable(store)
    assert len(found) == 10 and all(WORD in r.text for r in found)
    by = {r.subject for r in found if erased in r.id or erased in r.source}
    assert by == {ERASED}, [(r.id, r.subject) for r in found]
    assert sum(r.subject == ERASED for r in found) == 5  # remember, tool, step, I/O, child
    # Sealed under the subject's key, whatever wrote it.
    scopes = {k.key_id: k.scope for k in store.list_data_keys(TENANT)}
    for rec in found:
        assert scopes[_record_key(store, db_url, rec.id)] == f"subject:{rec.subject}"
    backup = _backup(store, db_url, tmp_path)

    done = erase_subject(store, ERASED, by="dpo", reason="request 7", tenant_id=TENANT)
    assert done.record.knowledge == 5
    left = readable(store)
    assert {r.subject for r in left} == {KEPT} and len(left) == 5
    kb = open_knowledge(store)
    assert all(kb.get(TENANT, r.id) is None for r in found if r.subject == ERASED)
    recall = recall_tool(kb)
    info = CallInfo("k", TENANT, kept, "first", 0)
    hits = recall.fn(recall.args_model.model_validate({"query": WORD, "limit": 50}), info)
    assert {h["id"] for h in hits} == {r.id for r in left}

    # The timeline says what purged the run, and names the erasure.
    purge = store.purged_runs(TENANT, run_id=erased, limit=1)[0]
    assert purge.erasure is not None
    shown = CliRunner().invoke(cli, ["--keyring", str(keyring), "--db", db_url, "runs",
                                     "show", erased, "--tenant", TENANT])
    assert shown.exit_code == 0, shown.output
    assert f"erased on request, erasure {purge.erasure}" in shown.output
    assert "by retention" not in shown.output and "(retention)" not in shown.output

    if backup is not None:
        restored = connect(backup)
        try:
            encrypt(restored, KeyringFile(keyring))
            texts = [r.text for r in readable(restored)]
            assert sum(WORD in t for t in texts) == 5  # the kept subject's only
            assert all(r.subject != ERASED or r.text == "[encrypted]"
                       for r in readable(restored))
        finally:
            restored.close()
    store.close()


def test_a_subjects_run_may_not_write_knowledge_about_another(
    encrypted: tuple[Store, Path]
) -> None:
    store, _ = encrypted
    kb = open_knowledge(store)
    seen: list[str] = []
    bad = uw.Flow("bad", state=Notes)

    @bad.step(start=True)
    async def write(ctx: uw.RunContext[Notes, Any]) -> Any:
        for record in (
            KnowledgeRecord(tenant_id=TENANT, text="x", source="s", created_at=1.0,
                            subject=KEPT),
            KnowledgeRecord(tenant_id="globex", text="x", source="s", created_at=1.0),
        ):
            with pytest.raises(ConfigurationError) as refused:
                kb.put(record)
            seen.append(str(refused.value))
        return ctx.done({})

    engine = uw.Engine(store, flows=[bad])
    engine.start("bad", tenant_id=TENANT, subject=ERASED)
    asyncio.run(uw.Runner(engine).run_until_idle())
    assert len(seen) == 2 and "about data subject 'cust-2'" in seen[0]
    assert "tenant 'globex'" in seen[1]
    # Outside a run, the writer names the subject (or none).
    kb.put(KnowledgeRecord(id="app", tenant_id=TENANT, text="x", source="s",
                           created_at=1.0))
    assert kb.get(TENANT, "app").subject is None  # type: ignore[union-attr]
    store.close()


def _record_key(store: Store, url: str, record_id: str) -> str:
    """The data key the stored row of a record is sealed with."""
    sql = "SELECT sealed FROM knowledge WHERE tenant_id = ? AND id = ?"
    if url.startswith("sqlite"):
        with store.connection() as c:  # type: ignore[attr-defined]
            (sealed,) = c.execute(sql, (TENANT, record_id)).fetchone()
    else:
        with store.pool.connection() as c:  # type: ignore[attr-defined]
            (sealed,) = c.execute(sql.replace("?", "%s"), (TENANT, record_id)).fetchone()
    return box_key_id(box_of(bytes(sealed)))


def _backup(store: Store, url: str, tmp_path: Path) -> str | None:
    """A copy of the SQLite file taken now (PostgreSQL backups are covered by
    tests/integration/encryption/test_erasure.py's schema copy)."""
    if not url.startswith("sqlite"):
        return None
    target = tmp_path / "backup.db"
    with sqlite3.connect(url.removeprefix("sqlite:///")) as src, \
            sqlite3.connect(target) as dst:
        src.backup(dst)
    return f"sqlite:///{target}"
