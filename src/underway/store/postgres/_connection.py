"""The connection pool every part of :class:`~underway.store.postgres.PostgresStore`
shares, and the schema's migrations."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from ...codec import Codec
from ...errors import ConfigurationError, MigrationError, StoreError
from .. import queries
from .._offload import Offload
from .._sqlbase.dialect import Read, Run, SQLBase
from .._urls import parse_url
from ..records import RunRecord
from ._pooler import Pooling

_Q = queries.load("postgres")


class Connection(SQLBase):
    """A pool of autocommit connections on the store's schema.

    Its ``offload`` is where async code runs this store's calls
    (:mod:`underway.store._offload`): as many threads as the pool has connections.

    Args:
        url: The PostgreSQL URL; a ``schema=`` parameter names the schema to use,
            ``pooler=`` what stands between the store and the server, and
            ``listen_url=`` a direct URL to LISTEN on (:mod:`._pooler`).
        min_size: The fewest connections the pool keeps.
        max_size: The most connections the pool opens.
        connect_timeout: How long opening the store waits for the server before giving up.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        connect_timeout: float = 10.0,
    ) -> None:
        parsed = parse_url(url)
        self.conninfo, self.schema = parsed.conninfo, parsed.schema
        self.pooling = Pooling(parsed)
        """How the connections meet a pooler in between (``pooler=``)."""
        self.listen_conninfo = parsed.listen_conninfo or (
            None if self.pooling.transaction else self.conninfo)
        """Where LISTEN goes; None behind a transaction pooler with no ``listen_url``."""
        self.codec = Codec()
        """How payloads are encoded, sealed and opened (``Database.codec``)."""
        self.offload = Offload(max_size, name="underway-postgres")
        self._pool = ConnectionPool(
            self.conninfo,
            min_size=min_size,
            max_size=max_size,
            connection_class=self.pooling.connection_class,
            kwargs={"autocommit": True, **self.pooling.kwargs},
            configure=self.pooling.configure,
            open=False,
            name=f"underway:{self.schema or 'default'}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            where = urlsplit(self.conninfo)
            raise StoreError(
                f"cannot connect to PostgreSQL at {where.hostname}:{where.port or 5432}"
                f"{where.path} within {connect_timeout:g}s; is the server running and the "
                "URL right?"
            ) from exc
        try:
            self.pooling.refuse_misrouted()
        except ConfigurationError:
            self._pool.close()
            raise
        # A database migrated by a newer underway is refused before anything is written.
        self._refuse_newer_schema("postgres", self._pool.close)

    # -- schema -------------------------------------------------------------------------
    def schema_version(self) -> int:
        """The highest migration applied (0 before the first): one query."""
        with self._pool.connection() as conn:
            try:
                row = conn.execute(_Q["schema_version"]).fetchone()
            except psycopg.errors.UndefinedTable:
                return 0  # never migrated (an autocommit connection stays usable)
            return int(row[0]) if row else 0

    def migrate(self, *, target: int | None = None) -> int:
        """Apply pending numbered migrations (up to ``target``, default all) in one
        transaction that holds an advisory lock, so concurrent migrators take turns.

        A schema already at the newest version is left alone after one read of its
        version, without the lock."""
        if target is None and (current := self._up_to_date("postgres")) is not None:
            return current
        name = "(version table)"
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(_Q["migration_lock"], {"schema": self.schema or ""})
                if self.schema is not None:
                    conn.execute(
                        sql.SQL(_Q["create_schema"]).format(schema=sql.Identifier(self.schema))
                    )
                conn.execute(_Q["schema_version_table"])
                row = conn.execute(_Q["schema_version"]).fetchone()
                current = int(row[0]) if row else 0
                known = queries.latest_version("postgres")
                if current > known:
                    # Raising rolls the whole transaction back: nothing is written.
                    raise MigrationError(queries.newer_schema_message(current, known))
                for version, name, text in queries.migrations("postgres"):
                    if version <= current or (target is not None and version > target):
                        continue
                    conn.execute(text)
                    conn.execute(
                        _Q["record_migration"],
                        {"version": version, "name": name, "applied_at": time.time()},
                    )
                    current = version
        except psycopg.Error as exc:
            raise MigrationError(
                f"migration {name} failed on schema {self.schema or '(search path)'}: {exc}"
            ) from exc
        return current

    def close(self) -> None:
        """Close every pooled connection (once the calls async code made have ended)."""
        self.offload.close()
        self._pool.close()

    @property
    def pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The store's connection pool: autocommit connections on the store's schema, for
        tables kept beside the store's own, such as the knowledge base's."""
        return self._pool

    # -- the dialect of the shared SQL bodies (store/_sqlbase) ---------------------------
    # One statement on an autocommit connection is a transaction of its own.
    def _all(self, name: str, /, **params: Any) -> list[tuple[Any, ...]]:
        with self._pool.connection() as conn:
            return conn.execute(_Q[name], params or None).fetchall()

    def _count(self, name: str, /, **params: Any) -> int:
        with self._pool.connection() as conn:
            return conn.execute(_Q[name], params).rowcount

    def _written(self, name: str, /, **params: Any) -> list[tuple[Any, ...]]:
        return self._all(name, **params)

    @contextmanager
    def _reads(self) -> Iterator[Read]:
        # Prepared: the reads of one block repeat one query.
        with self._pool.connection() as conn:
            yield lambda name, /, **params: conn.execute(_Q[name], params, prepare=True).fetchall()

    @contextmanager
    def _transaction(self) -> Iterator[Run]:
        with self._pool.connection() as conn, conn.transaction():
            yield _runner(conn)

    @staticmethod
    def _array(values: Iterable[Any]) -> list[Any]:
        return list(values)

    @staticmethod
    def _from_array(value: Any) -> list[Any]:
        return list(value)

    @staticmethod
    def _blob(value: Any) -> bytes:
        return bytes(value)

    @staticmethod
    def _run(row: Any) -> RunRecord:
        return _run(row)


def _run(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(*row)


def _runner(conn: psycopg.Connection[Any]) -> Run:
    """Runs named queries on ``conn`` (in the transaction open on it, if any)."""
    return lambda name, /, **params: conn.execute(_Q[name], params)
