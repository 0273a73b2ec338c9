"""Database URLs read without loading a backend: a command can check a PostgreSQL URL
without importing psycopg."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq connection URL without ``schema=``, and the schema it named (if any).

    The other parameters reach libpq as given: a URL naming no schema is returned
    unchanged, and one that does is re-encoded with spaces as ``%20`` (libpq reads a ``+``
    as a plus sign, so ``options=-c%20statement_timeout%3D5000`` must not become
    ``-c+statement_timeout...``)."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [v for k, v in params if k == "schema"]
    if len(schemas) > 1 or (schemas and not schemas[0]):
        raise ConfigurationError(f"PostgreSQL URL {url!r} must name at most one schema")
    if not schemas:
        return url, None
    rest = urlencode([(k, v) for k, v in params if k != "schema"], quote_via=quote)
    return urlunsplit(parts._replace(query=rest)), schemas[0]
