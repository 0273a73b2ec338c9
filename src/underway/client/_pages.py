"""What the client's reads hand back: a run's events, a page of runs and a run's children,
and the opaque cursor of the next page of runs."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from .. import inputs
from ..errors import ConfigurationError, InvalidInput
from ..events import JSON
from ..store import RunRecord


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run as journaled: its sequence number, time (epoch seconds), the
    decoded event and its chain hash."""

    seq: int
    at: float
    event: Any
    hash: str


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of :meth:`Client.list_runs`: the runs, newest first, and the cursor of the
    next page (None on the last page)."""

    runs: list[RunRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A run another run started with ``ctx.start`` (:meth:`Client.children`): its id,
    ``flow``, the ``key`` it was started with and whether it is ``detached``; ``status``
    is the child's status now (None: the parent journaled the start but the child is not
    created yet — its worker stopped in between and will create it when the step runs
    again); ``ended`` once the child's end reached the parent, with ``result`` or
    ``error``."""

    run_id: str
    flow: str
    key: str
    detached: bool
    status: str | None
    ended: bool
    result: JSON = None
    error: str | None = None



def encode_cursor(created_at: float, run_id: str) -> str:
    """The cursor of the page after the run created at ``created_at`` with ``run_id``."""
    raw = json.dumps([created_at, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """What ``cursor`` points after; a cursor not made by :func:`encode_cursor` is a
    :class:`~underway.errors.ConfigurationError`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = inputs.parse_json("cursor", raw)
        if isinstance(at, int | float) and not isinstance(at, bool) and isinstance(run_id, str):
            return inputs.number("cursor", float(at)), run_id
    except (binascii.Error, ValueError, TypeError, OverflowError, InvalidInput):
        pass
    raise ConfigurationError(f"invalid cursor {cursor!r}: pass a next_cursor as given")
