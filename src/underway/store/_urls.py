"""Database URLs read without loading a backend: a command can check a PostgreSQL URL
without importing psycopg."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError

POOLERS = ("none", "session", "transaction")
"""The values of a PostgreSQL URL's ``pooler=`` parameter: what stands between the store
and the server (``none``, the default: nothing that shares server sessions)."""

_OURS = ("schema", "pooler", "listen_url")
"""The URL parameters the store reads itself; libpq never sees them."""


@dataclass(frozen=True, slots=True)
class PostgresURL:
    """A PostgreSQL URL taken apart: what libpq reads, and what the store reads itself.

    Args:
        conninfo: The libpq URL, without the store's own parameters.
        schema: The schema ``schema=`` named, or None (the server's search path).
        pooler: ``none``, ``session`` or ``transaction`` (``pooler=``).
        listen_conninfo: The libpq URL ``listen_url=`` named for LISTEN, or None.
    """

    conninfo: str
    schema: str | None
    pooler: str
    listen_conninfo: str | None


def parse_url(url: str) -> PostgresURL:
    """Take ``url`` apart (:class:`PostgresURL`); refuse a repeated or empty ``schema``,
    ``pooler`` or ``listen_url``, and a pooler not in :data:`POOLERS`.

    The other parameters reach libpq as given: a URL naming none of the store's own is
    returned unchanged, and one that does is re-encoded with spaces as ``%20`` (libpq
    reads a ``+`` as a plus sign, so ``options=-c%20statement_timeout%3D5000`` must not
    become ``-c+statement_timeout...``)."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    found: dict[str, str] = {}
    for name in _OURS:
        values = [v for k, v in params if k == name]
        if len(values) > 1 or (values and not values[0]):
            raise ConfigurationError(f"PostgreSQL URL {url!r} must name at most one {name}")
        if values:
            found[name] = values[0]
    pooler = found.get("pooler", "none")
    if pooler not in POOLERS:
        raise ConfigurationError(
            f"PostgreSQL URL {url!r}: pooler={pooler!r} is not one of {', '.join(POOLERS)}; "
            "behind PgBouncer in transaction mode use pooler=transaction")
    listen = found.get("listen_url")
    if listen is not None:
        inner = parse_url(listen)
        if inner.pooler == "transaction":
            raise ConfigurationError(
                f"PostgreSQL URL {url!r}: listen_url must reach the server directly, not "
                "through a transaction pooler (LISTEN cannot pass one)")
        listen = inner.conninfo
    if not found:
        return PostgresURL(url, None, pooler, None)
    rest = urlencode([(k, v) for k, v in params if k not in _OURS], quote_via=quote)
    return PostgresURL(urlunsplit(parts._replace(query=rest)), found.get("schema"), pooler,
                       listen)


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq connection URL without the store's own parameters (``schema=``,
    ``pooler=``, ``listen_url=``: :func:`parse_url`), and the schema it named (if any)."""
    parsed = parse_url(url)
    return parsed.conninfo, parsed.schema
