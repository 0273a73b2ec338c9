"""How the store's connections meet a connection pooler between them and the server.

A PostgreSQL URL says what stands in between with ``pooler=`` (:data:`~underway.store.
_urls.POOLERS`):

- ``none`` (the default): nothing. Each pooled connection is one server session. It
  keeps its schema as session state and prepares the statements it repeats. Opening it
  checks that claim: a pooler hands the client a backend pid of its own, so a pid that
  is not the server's is refused with a message naming ``pooler=``, before any session
  state is set.
- ``session``: a pooler that gives each client one server session (PgBouncer's
  ``pool_mode=session``). The same as ``none``, without the check.
- ``transaction``: PgBouncer's ``pool_mode=transaction``. Each transaction may run on
  another server session, so the connection keeps nothing between transactions. It
  prepares nothing (``prepare_threshold=None``, which also turns every ``prepare=True``
  off). It sets the schema with ``set_config('search_path', ..., true)`` at the start of
  every transaction, in the same round trip as the first statement. A statement outside
  a transaction runs as a pipeline of the two, so one implicit transaction. COPY and
  named cursors, which psycopg runs outside pipelines, run inside a transaction (the path
  then costs a round trip); a cursor ``WITH HOLD`` is refused.

The schema is set by :class:`PooledConnection` and its cursors, under every statement the
store sends: no code path can forget it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Self
from urllib.parse import urlsplit

import psycopg
from psycopg import pq, sql
from psycopg.abc import Params, Query

from ...errors import ConfigurationError
from .. import queries
from .._urls import PostgresURL
from ._pipelines import pipelined

_OPEN_SESSION = queries.load("postgres")["open_session"]
_LOCAL_PATH = queries.load("postgres")["set_local_search_path"]


class PooledConnection(psycopg.Connection[Any]):
    """A connection behind a transaction pooler: it keeps no session state, and sets its
    :attr:`search_path` at the start of every transaction it opens on the server."""

    search_path: str | None = None
    """The quoted schema every transaction runs on; None leaves the server's own."""

    _depth = 0
    _pathed = False

    @contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        """``Connection.transaction``, counted: its first statement sets the path."""
        with super().transaction(savepoint_name, force_rollback) as tx:
            if self._depth == 0:
                self._pathed = False
            self._depth += 1
            try:
                yield tx
            finally:
                self._depth -= 1

    @contextmanager
    def pathed(self, *, pipeline: bool = True) -> Iterator[None]:
        """Run the statement sent inside on the schema: with the path set before it in
        the same round trip when the server transaction it runs in does not have it.
        Without ``pipeline`` (COPY, a named cursor: psycopg runs neither in a pipeline)
        the path costs a round trip of its own, and only a transaction can keep it."""
        if self.search_path is None or not self._path_due():
            yield
            return
        if not pipeline:
            if self._depth == 0 and self.pgconn.transaction_status == pq.TransactionStatus.IDLE:
                raise ConfigurationError(
                    "behind a transaction pooler (pooler=transaction) COPY and named cursors "
                    "run inside a transaction: open one with connection.transaction()")
            self._put_path()
            yield
            return
        if self.pgconn.pipeline_status != pq.PipelineStatus.OFF:
            self._put_path()
            yield
            return
        with pipelined(self):
            self._put_path()
            yield

    def _path_due(self) -> bool:
        if self._depth:
            return not self._pathed
        # ACTIVE: a pipeline's implicit transaction is open, and its first statement
        # carried the path. IDLE: the statement starts a transaction of its own.
        # INTRANS outside a counted transaction (a BEGIN sent by hand): set it again.
        status = self.pgconn.transaction_status
        return status in (pq.TransactionStatus.IDLE, pq.TransactionStatus.INTRANS)

    def _put_path(self) -> None:
        # A plain cursor: this statement must not ask for the path itself.
        psycopg.Cursor(self).execute(_LOCAL_PATH, {"path": self.search_path})
        self._pathed = self._depth > 0


class PooledCursor(psycopg.Cursor[Any]):
    """The cursor of a :class:`PooledConnection`: each statement runs on the schema."""

    def execute(
        self, query: Query, params: Params | None = None, *,
        prepare: bool | None = None, binary: bool | None = None,
    ) -> Self:
        """``Cursor.execute``, on the schema."""
        with _pathed(self):
            # Untyped: psycopg overloads it (a template takes no params) by version.
            send: Any = super().execute
            send(query, params, prepare=prepare, binary=binary)
        return self

    def executemany(
        self, query: Query, params_seq: Iterable[Params], *, returning: bool = False
    ) -> None:
        """``Cursor.executemany``, on the schema (one pipeline: one transaction)."""
        with _pathed(self):
            super().executemany(query, params_seq, returning=returning)


    @contextmanager
    def copy(
        self, statement: Query, params: Params | None = None, *, writer: Any = None,
    ) -> Iterator[psycopg.Copy]:
        """``Cursor.copy``, on the schema, inside a transaction."""
        with _pathed(self, pipeline=False), super().copy(statement, params,
                                                          writer=writer) as copy:
            yield copy


class PooledServerCursor(psycopg.ServerCursor[Any]):
    """A named cursor of a :class:`PooledConnection`: declared on the schema, never
    ``WITH HOLD`` (it would outlive its transaction, on a session others then share)."""

    def execute(
        self, query: Query, params: Params | None = None, *,
        binary: bool | None = None, **kwargs: Any,
    ) -> Self:
        """``ServerCursor.execute``, on the schema, inside a transaction."""
        if self.withhold:
            raise ConfigurationError(
                "a cursor WITH HOLD outlives its transaction: not behind a transaction "
                "pooler (pooler=transaction)")
        with _pathed(self, pipeline=False):
            send: Any = super().execute
            send(query, params, binary=binary, **kwargs)
        return self


def _pathed(cur: psycopg.Cursor[Any], *, pipeline: bool = True) -> Any:
    conn = cur.connection
    assert isinstance(conn, PooledConnection)
    return conn.pathed(pipeline=pipeline)


class Pooling:
    """The connection options and ``configure`` hook of one store's pool, for its URL's
    ``pooler=`` (see the module's docstring).

    Args:
        url: The store's URL, taken apart.
    """

    def __init__(self, url: PostgresURL) -> None:
        self.url = url
        self.transaction = url.pooler == "transaction"
        """Whether the store runs behind a transaction pooler."""
        self._misrouted: str | None = None
        self._checked = False

    @property
    def connection_class(self) -> type[psycopg.Connection[Any]]:
        """The class of the pool's connections."""
        return PooledConnection if self.transaction else psycopg.Connection

    @property
    def kwargs(self) -> dict[str, Any]:
        """Connection options beyond autocommit: behind a transaction pooler, no
        prepared statements and cursors that set the schema."""
        if not self.transaction:
            return {}
        return {"prepare_threshold": None, "cursor_factory": PooledCursor}

    def configure(self, conn: psycopg.Connection[Any]) -> None:
        """Make a new connection ready: its schema (per transaction, or for the session
        once the server's pid proved there is no pooler in between)."""
        path = (None if self.url.schema is None
                else sql.Identifier(self.url.schema).as_string(conn))
        if isinstance(conn, PooledConnection):
            conn.search_path = path
            conn.server_cursor_factory = PooledServerCursor
            return
        row = conn.execute(_OPEN_SESSION, {
            "pid": conn.info.backend_pid, "path": path,
            "checked": self.url.pooler == "none",
        }).fetchone()
        server_pid = None if row is None else int(row[0])
        if self.url.pooler == "none" and server_pid != conn.info.backend_pid:
            self._misrouted = self._message(conn.info.backend_pid, server_pid)
            if self._checked:
                raise ConfigurationError(self._misrouted)

    def refuse_misrouted(self) -> None:
        """Raise if a connection reached the server through a pooler the URL did not
        name (once the pool is open; later connections raise as they are made)."""
        self._checked = True
        if self._misrouted is not None:
            raise ConfigurationError(self._misrouted)

    def _message(self, pid: int, server_pid: int | None) -> str:
        where = urlsplit(self.url.conninfo)
        return (
            f"PostgreSQL at {where.hostname}:{where.port or 5432} answers through a "
            f"connection pooler: the connection's backend pid {pid} is not the server's "
            f"({server_pid}). Session state and prepared statements would reach other "
            "clients' sessions. Behind PgBouncer in transaction mode add "
            "pooler=transaction to the URL (and listen_url=<a direct URL> for LISTEN); "
            "behind a pooler in session mode, pooler=session"
        )
