"""What a named PostgreSQL query reads: its executed plan, prepared as the store prepares it.

The store sends its hot queries with ``prepare=True``: after five runs PostgreSQL may
switch to a generic plan, made without the parameters' values. So a query is measured
under both plan cache modes. :func:`explain` returns the plan of one execution (rolled
back: a claim's locks and leases are undone) with the pages it read from shared buffers
or disk, which is what grows when a query scans.

Used by ``bench/million.py`` and ``tests/integration/test_million_plans.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from psycopg import Connection, sql

from underway.store.queries import load

MODES = ("force_custom_plan", "force_generic_plan")
"""The plan cache modes a prepared statement can end in."""


@dataclass(frozen=True)
class Plan:
    """One executed plan: its top node as PostgreSQL wrote it, and what it read."""

    tree: dict[str, Any]

    @property
    def pages(self) -> int:
        """Shared pages the statement touched (hit in the buffer cache or read)."""
        return int(self.tree.get("Shared Hit Blocks", 0)) + int(
            self.tree.get("Shared Read Blocks", 0))

    @property
    def ms(self) -> float:
        """The statement's time in the executor, ms."""
        return float(self.tree["Actual Total Time"])

    def nodes(self) -> list[str]:
        """Every node type of the plan."""
        return _walk(self.tree, "Node Type")

    def indexes(self) -> list[str]:
        """The indexes the plan reads."""
        return _walk(self.tree, "Index Name")

    def scans(self) -> list[str]:
        """The tables read by a sequential scan."""
        return [n.get("Relation Name", "?") for n in nodes_of(self.tree)
                if n["Node Type"] == "Seq Scan"]

    def text(self) -> str:
        """The plan as JSON, for a failure message."""
        return json.dumps(self.tree, indent=1)


def nodes_of(node: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan node and every node under it."""
    return [node, *(n for child in node.get("Plans", []) for n in nodes_of(child))]


def _walk(node: dict[str, Any], key: str) -> list[str]:
    return [str(n[key]) for n in nodes_of(node) if key in n]


def explain(conn: Connection[Any], name: str, params: dict[str, Any], *, mode: str) -> Plan:
    """Execute the named query once under ``plan_cache_mode = mode``, prepared with the
    parameter types PostgreSQL infers (as psycopg's prepared statements are), rolled back.

    Args:
        conn: A connection whose search path selects the store's schema.
        name: The query's name in ``store/sql/postgres.sql``.
        params: Its parameters, by name.
        mode: One of :data:`MODES`.
    """
    order: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in order:
            order.append(m.group(1))
        return f"${order.index(m.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, load("postgres")[name]).replace("%%", "%")
    values = sql.SQL(", ").join(sql.Literal(params[k]) for k in order)
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE probe AS {text}".encode())
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
            [(doc,)] = conn.execute(sql.SQL(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE probe ({})").format(values)
            ).fetchall()
    finally:
        conn.execute("DEALLOCATE probe")
    found = doc if isinstance(doc, list) else json.loads(doc)
    return Plan(dict(found[0]["Plan"]))
