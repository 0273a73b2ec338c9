"""``/metrics`` stays cheap under load and can be closed.

A scrape counts the runs table's rows and reads no journal. Runs parked for an approval,
for an answer and for a resolution are counted by kind, as their rows record it. A forged
kind is reported by the audit and rebuilt from the journal. With
``[serve] metrics_token_env`` set, a scrape without the token gets a 401 problem. On
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from insider import insider
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from typer.testing import CliRunner

import underway as uw
from underway.cli import app
from underway.config import load_config
from underway.engine._rows import heal_row
from underway.errors import ConfigurationError, OutcomeUnknown
from underway.guard.policy import policy_from_dict
from underway.runner import Runner
from underway.service import ServerThread, create_app
from underway.store import Store, connect
from underway.telemetry import DatabaseCollector


class Nothing(BaseModel):
    pass


class Ask(BaseModel):
    kind: str = "approval"


@uw.tool(mutating=True)
async def pay(args: dict[str, Any]) -> dict[str, Any]:
    """Pay (held for approval by the policy)."""
    return {"paid": True}


@uw.tool(mutating=True)
async def broken(args: dict[str, Any]) -> dict[str, Any]:
    """Lose track of an effect: only a person can settle it."""
    raise OutcomeUnknown("the connection broke after the request was sent")


POLICY = policy_from_dict({"version": "v1", "rules": [
    {"id": "pay", "tools": ["pay"], "outcome": "require_approval", "approver_role": "fin",
     "expires_in": 3600},
]})

flow: uw.Flow[Nothing, Ask] = uw.Flow("parked", state=Nothing, input=Ask, policy=POLICY,
                                      tools=[pay, broken])


@flow.step
async def park(ctx: uw.RunContext[Nothing, Ask]) -> Any:
    if ctx.input.kind == "question":
        return ctx.done(await ctx.ask("which account?"))
    if ctx.input.kind == "resolution":
        await ctx.call(broken, {})
    return ctx.done(await ctx.call(pay, {}))


@pytest.fixture
def parked(db_url: str) -> Iterator[tuple[Store, uw.Engine, dict[str, list[str]]]]:
    store = connect(db_url)
    engine = uw.Engine(store, flows=[flow])
    runs = {k: [engine.start(flow, {"kind": k})[0] for _ in range(n)]
            for k, n in (("approval", 4), ("question", 2), ("resolution", 3))}
    asyncio.run(Runner(engine).run_until_idle())
    yield store, engine, runs
    store.close()


def pending(collector: DatabaseCollector) -> dict[str, float]:
    for family in collector.collect():
        if family.name == "underway_pending_requests":
            return {s.labels["kind"]: s.value for s in family.samples}
    raise AssertionError("no underway_pending_requests")


def test_a_scrape_counts_requests_from_the_runs_table(
    parked: tuple[Store, uw.Engine, dict[str, list[str]]],
) -> None:
    store, engine, runs = parked
    collector = DatabaseCollector(store)
    assert pending(collector) == {"approval": 4, "question": 2, "resolution": 3}
    # One run moves on (it is cancelled): it leaves the count with its row.
    engine.client.cancel(runs["question"][0], by="ops", reason="asked elsewhere")
    asyncio.run(Runner(engine).run_until_idle())
    assert engine.state(runs["question"][0]).status == "cancelled"
    assert pending(collector) == {"approval": 4, "question": 1, "resolution": 3}
    # A signal the run does not wait for moves its row and leaves its request as it was.
    engine.client.signal(runs["approval"][0], "note", {"seen": True})
    asyncio.run(Runner(engine).run_until_idle())
    assert pending(collector) == {"approval": 4, "question": 1, "resolution": 3}


def test_a_scrape_reads_no_journal(
    parked: tuple[Store, uw.Engine, dict[str, list[str]]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, _, _ = parked
    collector = DatabaseCollector(store)

    def no_journal(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a scrape read a journal")

    for method in ("load_events", "load_checkpoint", "load_checkpoints"):
        monkeypatch.setattr(store, method, no_journal)
    assert pending(collector) == {"approval": 4, "question": 2, "resolution": 3}


def test_forged_request_kinds_are_reported_and_rebuilt_from_the_journal(
    db_url: str, parked: tuple[Store, uw.Engine, dict[str, list[str]]],
) -> None:
    store, engine, runs = parked
    collector = DatabaseCollector(store)
    with insider(db_url) as sql:
        sql.q("UPDATE runs SET request_kind = NULL WHERE run_id = ?", runs["approval"][0])
        sql.q("UPDATE runs SET request_kind = 'approval' WHERE run_id = ?",
              runs["question"][0])
        sql.q("UPDATE runs SET request_kind = 'question' WHERE run_id = ?",
              runs["resolution"][0])
    assert pending(collector) == {"approval": 4, "question": 2, "resolution": 2}
    result = CliRunner().invoke(app, ["audit", "verify", "--db", db_url, "--all"])
    assert result.exit_code == 1, result.stdout
    forged = {runs["approval"][0], runs["question"][0], runs["resolution"][0]}
    reported = {line.split()[2] for line in result.stdout.splitlines()
                if line.startswith("TAMPERED run") and "request_kind" in line}
    assert reported == forged, result.stdout
    for run_id in sorted(forged):  # the rows rebuilt from their journals
        found = heal_row(engine.services, "default", run_id)
        assert [d.field for d in found] == ["request_kind"]
    assert pending(collector) == {"approval": 4, "question": 2, "resolution": 3}
    result = CliRunner().invoke(app, ["audit", "verify", "--db", db_url, "--all"])
    assert result.exit_code == 0, result.stdout


def test_the_row_names_the_request_the_journal_names(
    parked: tuple[Store, uw.Engine, dict[str, list[str]]],
) -> None:
    store, engine, runs = parked
    for kind, ids in runs.items():
        for run_id in ids:
            row = store.get_run("default", run_id)
            request = engine.client.pending_request(run_id)
            assert row is not None and request is not None
            assert row.request_kind == request.kind == kind
    engine.client.cancel(runs["approval"][0], by="ops", reason="not needed")
    asyncio.run(Runner(engine).run_until_idle())
    row = store.get_run("default", runs["approval"][0])
    assert row is not None and row.status == "cancelled" and row.request_kind is None


@pytest.mark.parametrize("token", [None, "s3cret-metrics-token"])
def test_metrics_need_the_token_when_one_is_set(
    parked: tuple[Store, uw.Engine, dict[str, list[str]]], token: str | None,
) -> None:
    store, _, _ = parked
    server = ServerThread(create_app(store, metrics=CollectorRegistry(), metrics_token=token))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            bare = http.get("/metrics")
            wrong = http.get("/metrics", headers={"Authorization": "Bearer nope"})
            odd = http.get("/metrics", headers={"Authorization": "Bearer café".encode()})
            right = http.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    finally:
        server.stop()
    if token is None:
        assert bare.status_code == 200
        return
    for r in (bare, wrong, odd):
        assert r.status_code == 401, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "metrics token" in r.json()["detail"]
        assert "underway_runs" not in r.text
    assert right.status_code == 200
    names = {f.name for f in text_string_to_metric_families(right.text)}
    assert {"underway_runs", "underway_pending_requests"} <= names


def test_a_metrics_token_named_but_not_set_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "underway.toml"
    path.write_text('[serve]\nmetrics_token_env = "UW_METRICS_TOKEN_UNSET"\n')
    config = load_config(path)
    with pytest.raises(ConfigurationError, match=r"serve\.metrics_token_env"):
        config.metrics_token({})
    assert config.metrics_token({"UW_METRICS_TOKEN_UNSET": "tok"}) == "tok"
