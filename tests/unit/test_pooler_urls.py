"""A PostgreSQL URL's own parameters: ``pooler=`` (none, session or transaction; anything
else is refused, naming the choices) and ``listen_url=`` (a direct URL for LISTEN, never
one through a transaction pooler). libpq never sees them."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from underway.errors import ConfigurationError
from underway.store._urls import parse_url, split_url

DIRECT = "postgresql://u@db:5432/app?sslmode=disable"


def test_a_plain_url_is_direct_and_listens_where_it_connects() -> None:
    parsed = parse_url(DIRECT)
    assert (parsed.conninfo, parsed.schema, parsed.pooler, parsed.listen_conninfo) == (
        DIRECT, None, "none", None)


def test_the_pooler_and_listen_url_are_taken_out_of_what_libpq_reads() -> None:
    url = (f"postgresql://u@bouncer:6432/app?schema=s1&pooler=transaction"
           f"&listen_url={quote(DIRECT + '&schema=ignored', safe='')}&sslmode=require")
    parsed = parse_url(url)
    assert parsed.conninfo == "postgresql://u@bouncer:6432/app?sslmode=require"
    assert parsed.schema == "s1" and parsed.pooler == "transaction"
    assert parsed.listen_conninfo == DIRECT  # its own schema= dropped: LISTEN has none
    assert split_url(url) == ("postgresql://u@bouncer:6432/app?sslmode=require", "s1")


@pytest.mark.parametrize("value", ["session", "none", "transaction"])
def test_each_pooler_value_is_read(value: str) -> None:
    assert parse_url(f"postgresql://h/db?pooler={value}").pooler == value


@pytest.mark.parametrize("query", ["pooler=statement", "pooler=pgbouncer", "pooler=",
                                   "pooler=transaction&pooler=transaction"])
def test_an_unknown_or_repeated_pooler_is_refused(query: str) -> None:
    with pytest.raises(ConfigurationError, match="pooler"):
        parse_url(f"postgresql://h/db?{query}")


def test_a_listen_url_through_a_transaction_pooler_is_refused() -> None:
    inner = quote("postgresql://h:6432/db?pooler=transaction", safe="")
    with pytest.raises(ConfigurationError, match="listen_url must reach the server directly"):
        parse_url(f"postgresql://h:6432/db?pooler=transaction&listen_url={inner}")
