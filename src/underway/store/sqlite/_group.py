"""A group commit's plain batches written together on SQLite: a few statements per group,
not a few per batch.

A plain batch (events, maybe a run update and a checkpoint; no signals, labels, blobs,
consumed signals or hand-back) is the common step's commit. Batch by batch, each one cost a
savepoint, a fence read, an insert per event, the update and the checkpoint, each its own
trip through SQLite, and each event's hash went through a Python function inside the
insert. Every trip gives up the interpreter lock and takes it back; while the event loop
is busy, taking it back waits for the loop's switch interval. So the group's write, which
holds up every activation of the group, grew with the loop's load.

Here a group's plain batches are fenced with one read and written with one multi-row
statement per table (in chunks of at most :data:`CHUNK` rows, so a few statement texts
serve every group size and stay in the connection's statement cache). Hashes are turned
into bytes here, before the insert. The bytes stored are the same.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from ...errors import ConflictError, FencedError, RunNotFound
from ..journal import AppendResult
from ..records import AppendBatch

CHUNK = 64
"""The most rows one statement writes: groups are cut into chunks of 64, 32, ... 1."""

_FENCE = """SELECT r.tenant_id, r.run_id, r.lease_token, r.lease_owner, r.control_pending,
       (SELECT COALESCE(MAX(seq), 0) FROM events e
         WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id) AS last_seq
  FROM (VALUES {rows}) AS k
  JOIN runs AS r ON r.tenant_id = k.column1 AND r.run_id = k.column2"""
_EVENTS = "INSERT INTO events (tenant_id, run_id, seq, type, payload, hash) VALUES {rows}"
_ADVANCE = """UPDATE runs
   SET last_seq = u.column3, last_hash = u.column4, status = u.column5, step = u.column6,
       next_wake_at = u.column7, waiting_signal = u.column8, error = u.column9,
       request_kind = u.column10, updated_at = u.column11
  FROM (VALUES {rows}) AS u
 WHERE runs.tenant_id = u.column1 AND runs.run_id = u.column2"""
_CHECKPOINTS = """INSERT INTO checkpoints (tenant_id, run_id, seq, state) VALUES {rows}
ON CONFLICT (tenant_id, run_id) DO UPDATE SET seq = excluded.seq, state = excluded.state"""


def plain(batch: AppendBatch) -> bool:
    """Whether ``batch`` can be written with the group's shared statements."""
    u = batch.update
    return bool(batch.events) and not (
        batch.signals or batch.consumed_signals or batch.release or batch.labels
        or batch.blobs or (u is not None and u.waiting_signal is not None))


def write_plain(c: sqlite3.Connection, batches: Sequence[AppendBatch],
                out: list[AppendResult | None], where: Sequence[int]) -> None:
    """Write the plain batches ``batches[i]`` for ``i`` in ``where`` inside the caller's
    transaction, setting ``out[i]``: whether control signals wait, or the refusal. A
    refused batch writes nothing; the others are written. Raises what SQLite raises, with
    the caller's savepoint to roll back."""
    heads: dict[tuple[str, str], sqlite3.Row] = {}
    for found in _many(c, _FENCE, "(?, ?)", [(batches[i].tenant_id, batches[i].run_id)
                                              for i in where]):
        heads[found[0], found[1]] = found
    events: list[tuple[Any, ...]] = []
    advances: list[tuple[Any, ...]] = []
    checkpoints: list[tuple[Any, ...]] = []
    for i in where:
        b = batches[i]
        t, r = b.tenant_id, b.run_id
        head = heads.get((t, r))
        try:
            check_fence(head, b)
        except Exception as exc:
            out[i] = exc
            continue
        assert head is not None
        out[i] = bool(head["control_pending"])
        events.extend((t, r, e.seq, e.type, e.payload, bytes.fromhex(e.hash))
                      for e in b.events)
        if (u := b.update) is not None:
            last = b.events[-1]
            advances.append((t, r, last.seq, last.hash, u.status, u.step, u.next_wake_at,
                             u.waiting_signal, u.error, u.request_kind, b.now))
        if b.checkpoint is not None:
            checkpoints.append((t, r, *b.checkpoint))
    _many(c, _EVENTS, "(?, ?, ?, ?, ?, ?)", events)
    _many(c, _ADVANCE, "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", advances)
    _many(c, _CHECKPOINTS, "(?, ?, ?, ?)", checkpoints)


def check_fence(row: sqlite3.Row | None, batch: AppendBatch) -> None:
    """Raise the refusal of ``batch`` by the run's fence ``row``, if any."""
    if row is None:
        raise RunNotFound(batch.tenant_id, batch.run_id)
    if row["lease_token"] != batch.fence or row["lease_owner"] is None:
        raise FencedError(
            f"run {batch.run_id}: lease token {batch.fence} is stale "
            f"(current {row['lease_token']}); another worker owns this run"
        )
    if row["last_seq"] != batch.expected_seq:
        raise ConflictError(
            f"run {batch.run_id}: expected last seq {batch.expected_seq}, "
            f"found {row['last_seq']}"
        )


_TEXTS: dict[tuple[str, int], str] = {}


def _many(c: sqlite3.Connection, sql: str, row: str, params: list[tuple[Any, ...]]
          ) -> list[sqlite3.Row]:
    """Run ``sql`` with its ``{rows}`` filled by as many ``row`` as a chunk holds, over
    ``params`` in chunks of :data:`CHUNK`, then halves; the rows it returns."""
    found: list[sqlite3.Row] = []
    at, size = 0, CHUNK
    while at < len(params):
        while size > len(params) - at:
            size //= 2
        text = _TEXTS.get((sql, size))
        if text is None:
            text = _TEXTS[sql, size] = sql.format(rows=", ".join([row] * size))
        found += c.execute(text, [v for p in params[at:at + size] for v in p]).fetchall()
        at += size
    return found
