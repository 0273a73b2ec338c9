"""Residency: a tenant's runs are stored only in its region's database. Two regions, each
a database of its own — two PostgreSQL databases made for the test (``CREATE DATABASE``),
or two SQLite files — named in ``[residency]`` of an underway.toml. Runs of a tenant of
each region are started through the client, the HTTP API (a start and a signed intake
webhook) and the CLI (``runs start``, ``events send``), with consent recorded through all
three; a real ``underway worker`` reading the same file drives them all to the end. Then
every table of each database is read whole: no row, and no value in any column, belongs to
a tenant of the other region. A tenant with no region is refused everywhere, and nothing
of it is stored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from residency_app import routes
from typer.testing import CliRunner

import underway as uw
from underway import webhooks
from underway.apikeys import issue_key
from underway.cli import app as cli
from underway.config import Config, ConfigError, load_config
from underway.errors import ResidencyError
from underway.scheduling.intake import intake
from underway.service import ServerThread, create_app
from underway.store.base import IntakeSecretRecord, Store

HERE = Path(__file__).resolve().parent
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
"""The server the PostgreSQL tests use without UNDERWAY_TEST_PG (as tests/conftest.py)."""
UNDERWAY = Path(sys.executable).with_name("underway")
PATIENCE_S = 120.0
"""A guard against hangs, never reached on a busy machine."""

TENANTS = {"in": "tenant-acme-in", "eu": "tenant-globex-eu"}
"""One tenant per region (names that occur nowhere else, so a scan can find them)."""


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {PATIENCE_S:g}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def regions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Two fresh regional databases: region name -> URL. The PostgreSQL ones are dropped
    by the janitor (tests/conftest.py): a DROP DATABASE waits for a checkpoint."""
    if request.param == "sqlite":
        yield {r: f"sqlite:///{tmp_path}/{r}.db" for r in TENANTS}
        return
    janitor = request.getfixturevalue("pg_janitor")
    base = os.environ.get("UNDERWAY_TEST_PG") or DEFAULT_PG
    names = {r: f"underway_{r}_{uuid.uuid4().hex[:10]}" for r in TENANTS}
    try:
        with psycopg.connect(base, autocommit=True, connect_timeout=60) as conn:
            for name in names.values():
                conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        pytest.fail(f"PostgreSQL at {base} is unreachable: {exc}", pytrace=False)
    server = base.rsplit("/", 1)[0]
    yield {r: f"{server}/{name}" for r, name in names.items()}
    for name in names.values():
        janitor.drop(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def config_file(tmp_path: Path, regions: dict[str, str]) -> Path:
    lines = ["[residency]", "[residency.regions]"]
    lines += [f'{r} = "{url}"' for r, url in regions.items()]
    lines += ["[residency.tenants]"]
    lines += [f'"{t}" = "{r}"' for r, t in TENANTS.items()]
    lines += ["[worker]", 'app = "residency_app:app"', "poll = 0.05"]
    path = tmp_path / "underway.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(folder: Path, *args: str) -> str:
    """An ``underway`` command run in ``folder``, which holds the underway.toml."""
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(here)
    assert result.exit_code == 0, result.output
    return result.output


def refused_by_cli(folder: Path, *args: str) -> str:
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(here)
    assert result.exit_code == 2, result.output
    return result.output


def test_each_tenant_s_rows_stay_in_its_region(
    tmp_path: Path, regions: dict[str, str], config_file: Path
) -> None:
    assert "schema version" in run_cli(tmp_path, "db", "migrate")
    config = load_config(config_file)
    store = config.open_store(migrate=False)
    assert store is not None
    try:
        started = start_everywhere(tmp_path, store)
        refuse_a_tenant_without_region(tmp_path, store)
        drive_with_a_worker(config_file, store, started)
    finally:
        store.close()
    for region, url in regions.items():
        others = [t for r, t in TENANTS.items() if r != region]
        foreign = others + [run for t in others for run in started[t]] + [
            f"subject-{t}" for t in others] + ["tenant-initech"]
        rows = scan(url)
        mine = [run for run in started[TENANTS[region]]]
        assert rows, f"region {region} holds nothing"
        assert any(TENANTS[region] in value for _, value in rows), f"{region} lost its tenant"
        assert all(any(run in value for _, value in rows) for run in mine)
        leaks = [(table, value[:200]) for table, value in rows
                 if any(marker in value for marker in foreign)]
        assert leaks == [], f"region {region} holds rows of another region: {leaks[:5]}"


def start_everywhere(folder: Path, store: Store) -> dict[str, list[str]]:
    """Start runs of each tenant through the client, the API and the CLI; their ids."""
    started: dict[str, list[str]] = {t: [] for t in TENANTS.values()}
    client = uw.Client(store)
    for tenant in TENANTS.values():
        subject = f"subject-{tenant}"
        client.grant_consent(subject, "service", by="crm", reference=f"CR-{tenant}",
                             tenant_id=tenant)
        run_id, _ = client.start("visit", {"customer": subject}, tenant_id=tenant,
                                 subject=subject, purpose="service")
        started[tenant].append(run_id)
        result = intake(client, {
            "tenant_id": tenant, "entity_id": f"entity-{tenant}-1",
            "event_type": "customer.visited", "occurred_at": time.time(), "source": "crm",
            "idempotency_key": f"key-{tenant}-1", "payload": {"customer": subject},
        }, routes)
        assert result.action == "started" and result.run_id is not None
        started[tenant].append(result.run_id)

    server = ServerThread(create_app(client, routes=routes))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            for tenant in TENANTS.values():
                subject = f"subject-{tenant}"
                token = issue_key(store, tenant_id=tenant, role="admin", name=f"ops-{tenant}",
                                  now=time.time()).token
                auth = {"Authorization": f"Bearer {token}"}
                r = http.post("/v1/consents", headers=auth, json={
                    "subject": subject, "purpose": "marketing", "state": "withdrawn"})
                assert r.status_code == 201, r.text
                r = http.post("/v1/runs", headers=auth, json={
                    "flow": "visit", "input": {"customer": subject}, "subject": subject,
                    "purpose": "service"})
                assert r.status_code == 201, r.text
                started[tenant].append(r.json()["run_id"])
                r = http.get(f"/v1/runs/{started[tenant][0]}", headers=auth)
                assert r.status_code == 200 and r.json()["subject"] == subject
                secret = webhooks.new_secret()
                store.put_intake_secret(IntakeSecretRecord(tenant, "crm", secret, time.time()))
                intake_token = issue_key(store, tenant_id=tenant, role="intake",
                                         now=time.time()).token
                body = json.dumps({
                    "entity_id": f"entity-{tenant}-2", "event_type": "customer.visited",
                    "idempotency_key": f"key-{tenant}-2", "payload": {"customer": subject},
                    "consent": f"CR-{tenant}",
                }).encode()
                r = http.post("/v1/intake/crm", content=body, headers={
                    "Authorization": f"Bearer {intake_token}",
                    "Content-Type": "application/json", **webhooks.sign(secret, body)})
                assert r.status_code == 200 and r.json()["action"] == "started", r.text
                started[tenant].append(r.json()["run_id"])
    finally:
        server.stop()

    for tenant in TENANTS.values():
        subject = f"subject-{tenant}"
        out = run_cli(folder, "runs", "start", "visit", "--tenant", tenant, "--input",
                      json.dumps({"customer": subject}), "--subject", subject,
                      "--purpose", "service", "--json")
        started[tenant].append(json.loads(out.splitlines()[-1])["run_id"])
        out = run_cli(folder, "events", "send", "--tenant", tenant, "--entity",
                      f"entity-{tenant}-3", "--type", "customer.visited", "--source", "crm",
                      "--key", f"key-{tenant}-3", "--routes", "residency_app:routes",
                      "--payload", json.dumps({"customer": subject}), "--json")
        started[tenant].append(json.loads(out.splitlines()[-1])["run_id"])
        out = run_cli(folder, "consent", "show", subject, "--tenant", tenant, "--json")
        shown = json.loads(out[out.index("{"):])
        assert {r["run_id"] for r in shown["runs"]} == set(started[tenant])
        assert {p["purpose"]: p["state"] for p in shown["current"]} == {
            "marketing": "withdrawn", "service": "granted"}
    return started


def refuse_a_tenant_without_region(folder: Path, store: Store) -> None:
    client = uw.Client(store)
    with pytest.raises(ResidencyError, match="tenant 'tenant-initech' has no region"):
        client.start("visit", {"customer": "x"}, tenant_id="tenant-initech")
    with pytest.raises(ResidencyError):
        issue_key(store, tenant_id="tenant-initech", role="admin", now=time.time())
    out = refused_by_cli(folder, "runs", "start", "visit", "--tenant", "tenant-initech")
    assert "tenant 'tenant-initech' has no region" in out


def drive_with_a_worker(config_file: Path, store: Store, started: dict[str, list[str]]) -> None:
    """A real ``underway worker`` reading the same underway.toml finishes every run."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    proc = subprocess.Popen([str(UNDERWAY), "worker", "--config", str(config_file)],
                            cwd=config_file.parent, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def finished() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"the worker exited: {proc.stderr.read() if proc.stderr else ''}")
            return all(
                (row := store.get_run(tenant, run_id)) is not None and row.status == "completed"
                for tenant, runs in started.items() for run_id in runs)

        wait_until(finished, "the worker to finish every run of both regions")
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, err
    assert "stopped" in out


def scan(url: str) -> list[tuple[str, str]]:
    """Every value of every row of every table of the database at ``url``, as text (bytes
    decoded leniently): (table, value)."""
    found: list[tuple[str, str]] = []
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                found += [(table, _text(v)) for v in row]
        conn.close()
        return found
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
            "AND table_type = 'BASE TABLE'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                found += [(table, _text(v)) for v in row]
    return found


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


def test_the_file_names_every_region_it_uses(tmp_path: Path) -> None:
    path = tmp_path / "underway.toml"
    path.write_text('[residency]\ndefault = "us"\n[residency.regions]\nin = "sqlite:///in.db"\n'
                    '[residency.tenants]\nacme = "eu"\n')
    with pytest.raises(ConfigError, match="tenant 'acme' is in region 'eu', which is not one "
                                        "of the regions"):
        load_config(path)
    path.write_text('database = "sqlite:///x.db"\n[residency.regions]\nin = "sqlite:///in.db"\n')
    with pytest.raises(ConfigError, match="either database or \\[residency\\]"):
        load_config(path)
    path.write_text('[residency.regions]\nin = "sqlite:///a.db"\neu = "sqlite:///a.db"\n')
    with pytest.raises(ConfigError, match="two regions share the database"):
        load_config(path)
    path.write_text('[residency.regions]\nin = "in.db"\n')
    config = load_config(path)
    assert isinstance(config, Config) and config.residency is not None
