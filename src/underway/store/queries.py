"""Loads the named SQL queries of a dialect from ``store/sql/<dialect>.sql``.

A query file is a sequence of blocks, each introduced by ``-- name: <query_name>``. A line
``-- include: <query_name>`` in a block stands for that whole query.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["latest_version", "load", "migrations", "newer_schema_message"]


@cache
def load(dialect: str) -> dict[str, str]:
    """Every named query of ``dialect``."""
    text = resources.files("underway.store").joinpath(f"sql/{dialect}.sql").read_text("utf-8")
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name:
                queries[name] = "\n".join(lines).strip()
            name, lines = line.split(":", 1)[1].strip(), []
        elif name:
            lines.append(line)
    if name:
        queries[name] = "\n".join(lines).strip()
    for narrowed, columns in _NARROWED.items():
        queries[narrowed] = _narrow(queries["list_runs"], columns, dialect)
    for name, query in queries.items():
        if _INCLUDE in query:
            queries[name] = "\n".join(
                queries[line.removeprefix(_INCLUDE).strip()] if line.startswith(_INCLUDE)
                else line for line in query.splitlines())
    return queries


_INCLUDE = "-- include:"
"""A line of a query that stands for another whole query, named after it: a statement
built on another is written once."""


_NARROWED = {"list_runs_by_status": ("status",), "list_runs_by_flow": ("flow",),
             "list_runs_by_flow_status": ("flow", "status")}
"""The listing's variants: ``list_runs`` with an equality on these columns. Each is a query
of its own, planned on the index that holds its columns in the listing's order."""

_PLACEHOLDER = {"sqlite": ":{}", "postgres": "%({})s"}


def _narrow(query: str, columns: tuple[str, ...], dialect: str) -> str:
    """``query``, whose filter opens ``WHERE tenant_id = <tenant>``, with an equality on
    each of ``columns`` after that one."""
    opening = "WHERE tenant_id = " + _PLACEHOLDER[dialect].format("tenant_id")
    if query.count(opening) != 1:
        raise ValueError(f"the {dialect} listing query does not open with {opening!r}")
    more = "".join(f" AND {c} = {_PLACEHOLDER[dialect].format(c)}" for c in columns)
    return query.replace(opening, opening + more)


def migrations(dialect: str) -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every numbered migration of ``dialect``, in order."""
    folder = resources.files("underway.store").joinpath(f"migrations/{dialect}")
    found = []
    for entry in folder.iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:4].isdigit():
            found.append((int(name[:4]), name, entry.read_text("utf-8")))
    return sorted(found)


@cache
def latest_version(dialect: str) -> int:
    """The newest schema version this code knows for ``dialect`` (its last migration).

    Read from the migrations' file names alone: opening a store asks it every time, and
    needs none of their SQL when the database is up to date."""
    folder = resources.files("underway.store").joinpath(f"migrations/{dialect}")
    return max((int(entry.name[:4]) for entry in folder.iterdir()
                if entry.name.endswith(".sql") and entry.name[:4].isdigit()), default=0)


def newer_schema_message(found: int, known: int) -> str:
    """The one line that refuses a database whose schema is newer than this code."""
    return (
        f"the database schema is at version {found}, newer than version {known}, the newest "
        "this underway knows; upgrade underway to use this database (nothing was written "
        "to it)"
    )
