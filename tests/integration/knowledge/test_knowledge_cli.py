"""``underway knowledge purge``, ``rm`` and ``reindex`` on a real SQLite file."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from underway.cli import app as root
from underway.cli import knowledge as knowledge_cli
from underway.crypto import KeyringFile, encrypt
from underway.knowledge import KnowledgeRecord, open_knowledge
from underway.store import connect

T0 = 1_700_000_000.0


def test_purge_and_rm_erase_knowledge(sqlite_url: str) -> None:
    kb = open_knowledge(sqlite_url)
    for id, expires_at in [("old", T0 + 1), ("older", T0 + 2), ("kept", None)]:
        kb.put(KnowledgeRecord(id=id, tenant_id="acme", text=f"{id} note", source="system",
                               created_at=T0, expires_at=expires_at))
    kb.close()
    cli = CliRunner()

    purged = cli.invoke(knowledge_cli.app, ["purge", "--db", sqlite_url, "--now", str(T0 + 5)])
    assert purged.exit_code == 0, purged.output
    assert purged.output.strip() == "erased 2 expired knowledge records"

    removed = cli.invoke(knowledge_cli.app, ["rm", "kept", "--tenant", "acme", "--db", sqlite_url])
    assert removed.exit_code == 0, removed.output
    missing = cli.invoke(knowledge_cli.app, ["rm", "kept", "--tenant", "acme", "--db", sqlite_url])
    assert missing.exit_code == 2
    assert "no knowledge record 'kept' in tenant 'acme'" in missing.output

    kb = open_knowledge(sqlite_url)
    assert kb.search("acme", "note", roles=(), now=T0) == []
    kb.close()


def test_purge_without_a_database_says_how_to_name_one(tmp_path: object) -> None:
    result = CliRunner().invoke(
        knowledge_cli.app, ["purge", "--db", f"sqlite:///{tmp_path}/absent.db"]
    )
    assert result.exit_code == 2
    assert "underway db migrate" in result.output


def test_reindex_says_what_it_did_and_needs_the_keys_for_sealed_records(
    sqlite_url: str, tmp_path: Path
) -> None:
    keyring = tmp_path / "keyring.json"
    KeyringFile.create(keyring)
    store = connect(sqlite_url)
    open_knowledge(store).put(KnowledgeRecord(id="plain", tenant_id="acme", source="system",
                                              text="ग्राहक हिंदी में", created_at=T0))
    encrypt(store, KeyringFile(keyring))
    open_knowledge(store).put(KnowledgeRecord(id="sealed", tenant_id="acme", source="system",
                                              text="सील हिंदी नोट", created_at=T0))
    store.close()
    cli = CliRunner()

    without = cli.invoke(root, ["knowledge", "reindex", "--db", sqlite_url])
    assert without.exit_code == 2
    assert "indexed 1 knowledge record again" in without.output
    assert "1 sealed record left as they were" in without.output
    assert "--keyring" in without.output

    with_keys = cli.invoke(root, ["--keyring", str(keyring), "knowledge", "reindex",
                                  "--tenant", "acme", "--db", sqlite_url])
    assert with_keys.exit_code == 0, with_keys.output
    assert with_keys.output.strip() == "indexed 2 knowledge records again"

    store = connect(sqlite_url)
    encrypt(store, KeyringFile(keyring))
    hits = open_knowledge(store).search("acme", "हिंदी", roles=(), now=T0 + 1)
    assert sorted(h.record.id for h in hits) == ["plain", "sealed"]
    store.close()
