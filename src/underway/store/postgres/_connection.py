"""The connection pool every part of :class:`~underway.store.postgres.PostgresStore`
shares, and the schema's migrations."""

from __future__ import annotations

import select
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Self
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

RECONNECT_EVERY_S = 0.25
RECONNECT_FOR_S = 5.0
"""A pooled connection that cannot be opened is tried again every
:data:`RECONNECT_EVERY_S` for this long before the pool's own backoff (1 s, doubling)
takes over: a failover takes seconds, and its new primary is found within a quarter
second of being up, not a long backoff later."""


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
            # Never past the time opening the store may take.
            connection_class=_reconnecting(min(RECONNECT_FOR_S, connect_timeout),
                                           self.pooling.connection_class),
            kwargs={"autocommit": True, **self.pooling.kwargs},
            configure=self.pooling.configure,
            check=self._check,
            open=False,
            name=f"underway:{self.schema or 'default'}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            where = urlsplit(self.conninfo)
            # The hosts as given: a multi-host URL names several (``h1:p1,h2:p2``).
            hosts = where.netloc.rpartition("@")[2]
            raise StoreError(
                f"cannot connect to PostgreSQL at {hosts}{where.path} within "
                f"{connect_timeout:g}s; is the server running and the URL right?"
            ) from exc
        try:
            self.pooling.refuse_misrouted()
        except ConfigurationError:
            self._pool.close()
            raise
        # A database migrated by a newer underway is refused before anything is written.
        self._refuse_newer_schema("postgres", self._pool.close)

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """Refuse a pooled connection whose server has gone; the pool then opens another,
        on whichever host is writable now (``target_session_attrs=read-write``).

        A server that stopped or failed over (Patroni) closed its end, so the idle
        connection has something to read: one ``poll``, not a round trip, at each
        checkout. The pool waits a second after each refused connection, so the first
        one found sends every idle connection through the pool's own check at once. A
        connection dropped silently (a host that vanished) is not caught here: libpq's
        ``keepalives`` and ``tcp_user_timeout`` options are (docs/high-availability.md).
        """
        if _spoke(conn):
            conn.close()
            self._pool.check()
            raise psycopg.OperationalError("the server closed the connection")

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


def _reconnecting(
    window: float, base: type[psycopg.Connection[Any]],
) -> type[psycopg.Connection[Any]]:
    """The connections a pool opens, of class ``base``: tried again every
    :data:`RECONNECT_EVERY_S` while no server answers (a restart, a failover), for
    ``window`` seconds at most."""

    class Reconnecting(base):  # type: ignore[valid-type,misc]
        @classmethod
        def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
            give_up = time.monotonic() + window
            while True:
                try:
                    conn: Self = super().connect(conninfo, **kwargs)
                    return conn
                except psycopg.OperationalError:
                    if time.monotonic() >= give_up:
                        raise
                time.sleep(RECONNECT_EVERY_S)

    return Reconnecting


def _spoke(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has something to read: its server's farewell (a FATAL
    message, the end of the stream). An idle pooled connection has nothing to hear."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _run(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(*row)


def _runner(conn: psycopg.Connection[Any]) -> Run:
    """Runs named queries on ``conn`` (in the transaction open on it, if any)."""
    return lambda name, /, **params: conn.execute(_Q[name], params)
