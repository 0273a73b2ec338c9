"""PostgreSQL URLs reach libpq as given: connection options in the URL (``options=-c ...``,
whose space is ``%20``) work with and without the store's ``schema=`` parameter."""

from __future__ import annotations

import psycopg
import pytest

from underway.store import connect
from underway.store._urls import split_url

pytestmark = pytest.mark.postgres

OPTIONS = "options=-c%20statement_timeout%3D4321"


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
