"""PostgreSQL URLs reach libpq as given: connection options in the URL (``options=-c ...``,
whose space is ``%20``) work with and without the store's ``schema=`` parameter, and so
does a multi-host URL (``h1:p1,h2:p2``, ``target_session_attrs=read-write``), in the store
and the CLI."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from underway.errors import StoreError
from underway.store import connect
from underway.store._urls import split_url
from underway.store.postgres import PostgresStore

pytestmark = pytest.mark.postgres

OPTIONS = "options=-c%20statement_timeout%3D4321"
UNDERWAY = Path(sys.executable).with_name("underway")


def test_a_url_naming_no_schema_is_passed_on_unchanged() -> None:
    url = f"postgresql://u@h:5432/db?{OPTIONS}&application_name=a%20b"
    assert split_url(url) == (url, None)


def test_removing_the_schema_keeps_spaces_as_percent_20() -> None:
    conninfo, schema = split_url(f"postgresql://u@h/db?{OPTIONS}&schema=s1")
    assert schema == "s1"
    assert conninfo == "postgresql://u@h/db?options=-c%20statement_timeout%3D4321"


def test_options_in_the_url_reach_the_server_with_a_schema(pg_url: str) -> None:
    sep = "&" if "?" in pg_url else "?"
    store = connect(f"{pg_url}{sep}{OPTIONS}")
    try:
        store.migrate()
        with store.pool.connection() as conn:
            row = conn.execute("SHOW statement_timeout").fetchone()
        assert row is not None and row[0] == "4321ms"
        assert store.schema_version() > 0
    finally:
        store.close()


def test_options_in_the_url_reach_the_server_without_a_schema(pg_url: str) -> None:
    base, _ = split_url(pg_url)
    sep = "&" if "?" in base else "?"
    conninfo, schema = split_url(f"{base}{sep}{OPTIONS}")
    assert schema is None
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SHOW statement_timeout").fetchone()
    assert row is not None and row[0] == "4321ms"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def multi_host(url: str) -> str:
    """``url`` with a host where nothing listens named first, and
    ``target_session_attrs=read-write``: what a client of a Patroni cluster uses."""
    parts = urlsplit(url)
    user, _, hosts = parts.netloc.rpartition("@")
    netloc = f"{user}@127.0.0.1:{_free_port()},{hosts}"
    query = f"{parts.query}&target_session_attrs=read-write".lstrip("&")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def test_a_multi_host_url_keeps_its_hosts_and_reaches_the_writable_one(pg_url: str) -> None:
    url = multi_host(pg_url)
    conninfo, schema = split_url(url)
    assert schema is not None and "," in urlsplit(conninfo).netloc
    store = connect(url)
    try:
        assert store.schema_version() > 0
        with store.pool.connection() as conn:
            row = conn.execute("SELECT current_schema(), pg_is_in_recovery()").fetchone()
        assert row == (schema, False)
    finally:
        store.close()
    done = subprocess.run([str(UNDERWAY), "runs", "ls", "--db", url], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_no_host_of_a_multi_host_url_answering_names_them_all() -> None:
    hosts = f"127.0.0.1:{_free_port()},127.0.0.1:{_free_port()}"
    with pytest.raises(StoreError, match=f"cannot connect to PostgreSQL at {hosts}/db"):
        PostgresStore(f"postgresql://u@{hosts}/db?target_session_attrs=read-write",
                      connect_timeout=1)
