"""``underway knowledge purge`` and ``underway knowledge rm`` on a real SQLite file."""

from __future__ import annotations

from typer.testing import CliRunner

from underway.cli import knowledge as knowledge_cli
from underway.knowledge import KnowledgeRecord, open_knowledge

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
