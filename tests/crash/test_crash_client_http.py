"""A client over HTTP whose server is killed: ``underway serve`` runs as a real process and is
killed with SIGKILL between two starts. The next start raises a clear
:class:`~underway.ServiceError`, nothing the server committed is lost, and starting every
run again by its idempotency key on a restarted server creates none twice. On SQLite and a
real PostgreSQL."""

from __future__ import annotations

import subprocess

import pytest

import underway as uw
from fakes.serving import UNDERWAY, serve

pytestmark = [pytest.mark.crash, pytest.mark.timeout(600)]

RUNS = 12
KILLED_AFTER = 7


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite"
                                       else "pg_url"))


def test_starts_survive_a_killed_server_and_are_made_once(db: str) -> None:
    subprocess.run([str(UNDERWAY), "--db", db, "db", "migrate"], check=True,
                   capture_output=True, timeout=120)
    token = subprocess.run([str(UNDERWAY), "--db", db, "apikeys", "new", "--tenant", "acme",
                            "--role", "operator", "--name", "ops"], check=True,
                           capture_output=True, text=True, timeout=120).stdout.strip()
    first: dict[str, str] = {}
    with serve(db) as (url, server), uw.Client(url, api_key=token) as remote:
        for i in range(KILLED_AFTER):
            run_id, created = remote.start("orders", {"n": i}, idempotency_key=f"order-{i}")
            assert created
            first[f"order-{i}"] = run_id
        server.kill()  # SIGKILL: no shutdown, no flush
        server.wait(60)
        with pytest.raises(uw.ServiceError, match=f"cannot reach underway serve at {url}"):
            remote.start("orders", {"n": KILLED_AFTER},
                         idempotency_key=f"order-{KILLED_AFTER}")
    with serve(db) as (url, _), uw.Client(url, api_key=token) as remote:
        again = {f"order-{i}": remote.start("orders", {"n": i},
                                            idempotency_key=f"order-{i}")
                 for i in range(RUNS)}
        assert {k: again[k] for k in first} == {k: (v, False) for k, v in first.items()}
        assert all(again[f"order-{i}"][1] for i in range(KILLED_AFTER, RUNS))
        listed = remote.list_runs(limit=100).runs
    assert sorted(r.idempotency_key or "" for r in listed) == sorted(again)
    assert len({r.run_id for r in listed}) == RUNS
    with uw.Client(db) as local:
        assert all(local.verify(r.run_id, tenant_id="acme").ok for r in listed)
