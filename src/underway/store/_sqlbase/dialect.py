"""What the shared SQL bodies ask of a dialect: how a named query runs, and how values
that SQLite and PostgreSQL store differently are converted."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from ...errors import MigrationError
from .. import queries
from ..records import RunRecord


class Cursor(Protocol):
    """What a statement run in a transaction answers."""

    @property
    def rowcount(self) -> int:
        """Rows the statement changed."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""


class Run(Protocol):
    """Runs a named query in the open transaction."""

    def __call__(self, name: str, /, **params: Any) -> Cursor:
        """The cursor of the statement ``name`` run with ``params``."""


class Read(Protocol):
    """Reads a named query on the held connection."""

    def __call__(self, name: str, /, **params: Any) -> list[Any]:
        """The rows of the query ``name`` run with ``params``."""


class SQLBase(ABC):
    """The dialect interface: each dialect's connection implements it.

    Queries are looked up by name in the dialect's SQL file and take named parameters.
    """

    @abstractmethod
    def schema_version(self) -> int:
        """The highest migration applied (0 before the first)."""

    def _refuse_newer_schema(self, dialect: str, close: Callable[[], None]) -> None:
        """Close and refuse a database that a newer underway migrated, untouched."""
        try:
            found, known = self.schema_version(), queries.latest_version(dialect)
        except BaseException:
            close()
            raise
        if found > known:
            close()
            raise MigrationError(queries.newer_schema_message(found, known))
        self._opened_at_newest = found == known

    def _up_to_date(self, dialect: str) -> int | None:
        """The schema version when it is the newest this code knows (nothing to migrate),
        else None; a newer one is refused. One read of the version, no lock, no file read;
        none at all the first time after opening found the newest version."""
        known = queries.latest_version(dialect)
        if self.__dict__.pop("_opened_at_newest", False):
            return known
        found = self.schema_version()
        if found > known:
            raise MigrationError(queries.newer_schema_message(found, known))
        return found if found == known else None

    @abstractmethod
    def _all(self, name: str, /, **params: Any) -> list[Any]:
        """The rows of one read."""

    @abstractmethod
    def _count(self, name: str, /, **params: Any) -> int:
        """Run one write in a transaction of its own; the rows it changed."""

    @abstractmethod
    def _written(self, name: str, /, **params: Any) -> list[Any]:
        """Run one write in a transaction of its own; the rows it returns."""

    @abstractmethod
    def _reads(self) -> AbstractContextManager[Read]:
        """Several reads on one connection, held for the block."""

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Run]:
        """One transaction for the block: committed at its end, rolled back on a raise."""

    @staticmethod
    @abstractmethod
    def _array(values: Iterable[Any]) -> Any:
        """A list of values as the dialect binds it (SQLite: JSON text)."""

    @staticmethod
    @abstractmethod
    def _from_array(value: Any) -> list[Any]:
        """An array column's value as a list."""

    @staticmethod
    @abstractmethod
    def _blob(value: Any) -> bytes:
        """A bytes column's value as bytes."""

    @staticmethod
    @abstractmethod
    def _run(row: Any) -> RunRecord:
        """A row of the runs table as a record."""
