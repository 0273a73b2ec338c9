"""psycopg pipelines as the PostgreSQL store runs them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


@contextmanager
def pipelined(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """``conn.pipeline()``, whose first error is raised once, after the pipeline closed.

    psycopg raises a statement's error where its answer arrives. On a slow or paused
    client that is inside the block, before the last statement is queued (a fenced
    append's refusal). Closing the pipeline then fails again ("pipeline aborted"), and
    psycopg logs ``error ignored terminating <psycopg.Pipeline>`` at each refusal. Here
    the pipeline closes first, its aborted rest is dropped, and the error is raised.

    Args:
        conn: The connection.
    """
    first: psycopg.Error | None = None
    try:
        with conn.pipeline():
            try:
                yield
            except psycopg.Error as exc:
                first = exc
    except psycopg.errors.PipelineAborted:
        if first is None:
            raise
    if first is not None:
        raise first
