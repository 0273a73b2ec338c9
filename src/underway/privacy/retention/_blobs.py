"""Collecting blobs no remaining event or checkpoint refers to, beside live runs.

Mark, then sweep: :func:`mark_blobs` follows every reference from every event and
checkpoint of the tenant (a purged event refers to nothing); :func:`sweep_blobs` deletes
the tenant's other blobs — but only those not written in the last ``grace`` seconds plus
the time since marking began, by the database's clock, in the statement that deletes them.

Why a live run cannot lose a blob. An append committed after the mark read its run may
refer to blob B the mark did not see. Either the append sent B — then B's row was written
(a new row, or a row whose mark was over :data:`~underway.store.retention.BLOB_REFRESH`
old written again) no earlier than :data:`~underway.store.retention.BLOB_REFRESH` before
the marking began — or its journal did not send B, because it committed B itself less than
:data:`~underway.journal.KNOWN_FOR` before, with the same effect on B's row. Either way B
was written within ``KNOWN_FOR + BLOB_REFRESH`` of the marking (plus the time between
encoding an append and committing it), which :data:`~underway.privacy.retention.BLOB_GRACE`
covers. A database races the delete with the append's write of the row: whichever comes
second sees the other (the row is gone and is written anew, or it is fresh and kept).

A tenant whose journal refers to a blob that is missing or cannot be read (an encrypted
payload without its key) is not collected: what such a value refers to is unknown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from ...codec import checkpoint_where, event_where
from ...events import JSON, is_tombstone
from ...journal import Journal
from ...journal.blobs import BlobReader, broken_blob
from ...store.features import observation, privacy

PAGE = 1000
"""Blob keys listed, and deleted, at a time."""


@dataclass(slots=True)
class Marks:
    """The blobs a tenant's journal refers to, as found by :func:`mark_blobs`."""

    tenant_id: str
    started: float
    """When marking began (``time.monotonic()``)."""
    reached: set[str] = field(default_factory=set)
    problem: str = ""
    """Why the tenant must not be collected now (empty when it may be)."""


def mark_blobs(journal: Journal, tenant_id: str,
               stop: Callable[[], bool] | None = None) -> Marks:
    """Every blob reachable from the tenant's events and checkpoints, kept ones included.

    Sealed payloads are opened through the journal's codec. One that cannot be opened here
    stops the marking: what it refers to is unknown.

    Args:
        journal: Reads the tenant's journals.
        tenant_id: The tenant.
        stop: Asked between runs. Once True, the marks say so and collect nothing.
    """
    store, codec = journal.store, journal.codec
    marks = Marks(tenant_id, time.monotonic())
    fetch = BlobReader(store, tenant_id)

    def content(key: str, stored: bytes) -> bytes:
        return codec.open_blob(stored, key, tenant_id)

    for _, run_id in store.journaled_runs(tenant_id):
        if stop is not None and stop():
            marks.problem = "the sweep was stopped"
            return marks
        found: list[tuple[str, Callable[[], JSON]]] = [
            (f"seq {s.seq}", partial(codec.event_data, s.payload,
                                     event_where(tenant_id, run_id, s.seq, s.type)))
            for s in store.load_events(tenant_id, run_id) if not is_tombstone(s.payload)
        ]
        row = store.load_checkpoint(tenant_id, run_id)
        # Kept checkpoints too: a state read at their place in the run needs their blobs
        # (a large dict of the state is one blob no event names).
        rows = [*observation(store).kept_checkpoints(tenant_id, run_id),
                *([] if row is None else [row])]
        found += [(f"checkpoint at seq {seq}", partial(
            codec.open_json, state, checkpoint_where(tenant_id, run_id, seq)))
            for seq, state in rows]
        for where, read in found:
            try:
                value = read()
            except Exception:
                marks.problem = f"run {run_id} {where} cannot be read"
                return marks
            bad = broken_blob(value, fetch, marks.reached, content=content, sealed_ok=False,
                              chunked=lambda key, row: codec.read_large(
                                  key, row, fetch, tenant_id))
            if bad is not None:
                marks.problem = (f"run {run_id} {where} refers to blob {bad}, which is "
                                 "missing or cannot be read")
                return marks
    return marks


def sweep_blobs(journal: Journal, marks: Marks, *, grace: float) -> int:
    """Delete the tenant's blobs that ``marks`` did not reach.

    Blobs written in the last ``grace`` seconds, or since marking began, are kept.

    Args:
        journal: Reads and deletes the tenant's blobs.
        marks: What the marking reached.
        grace: Seconds a new blob is kept.

    Returns:
        How many blobs were deleted.
    """
    if marks.problem:
        return 0
    store, tenant = privacy(journal.store), marks.tenant_id
    deleted, after = 0, None
    while keys := store.blob_keys(tenant, after=after, limit=PAGE):
        doomed = [k for k in keys if k not in marks.reached]
        if doomed:
            idle = grace + (time.monotonic() - marks.started) + 1.0
            deleted += store.delete_blobs(tenant, doomed, idle=idle)
        after = keys[-1]
    return deleted
