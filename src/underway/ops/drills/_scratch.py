"""The scratch database a drill runs in: never the database it was pointed at.

``--db`` names the kind and the server: on PostgreSQL the drill makes a fresh schema in
that database and drops it afterwards; on SQLite it uses a new file in the drill's
scratch directory (the file the URL names is not touched)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg

from ...errors import ConfigurationError
from ...store._urls import split_url


@contextmanager
def scratch_database(url: str, workdir: Path, *, keep: bool = False) -> Iterator[str]:
    """The URL of a fresh, empty database of the kind ``url`` names; removed afterwards
    unless ``keep``."""
    if url.startswith("sqlite://"):
        yield f"sqlite:///{workdir / 'drill.db'}"
        return
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigurationError(
            f"--db {url!r}: a drill runs on sqlite:///... or postgresql://... (it makes a "
            "scratch database of that kind)")
    base, _ = split_url(url)
    schema = f"underway_drill_{secrets.token_hex(6)}"
    try:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except psycopg.Error as exc:
        raise ConfigurationError(f"--db: cannot make a scratch schema on {_shown(base)}: "
                                 f"{exc}") from None
    parts = urlsplit(base)
    query = urlencode([*parse_qsl(parts.query), ("schema", schema)])
    try:
        yield urlunsplit(parts._replace(query=query))
    finally:
        if not keep:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _shown(url: str) -> str:
    """``url`` without its password."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.username
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))
