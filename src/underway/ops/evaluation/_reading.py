"""Reading journals for figures, cheaply: which runs, a few kinds of event of them, and each
event's data as it is stored.

A figure over many runs needs small facts — a tool's name, an outcome, a token count, a
time — from a few kinds of event, never the conversations, arguments, results and states
around them. So the events are read with :meth:`~underway.store.journal.JournalStore.
events_by_type` (:data:`~underway.store.journal.RUN_BATCH` runs a query, on the journal's
primary key; the other kinds' payloads are not read), and each is opened as stored: its
envelope parsed, its data opened when sealed, **blob references left unresolved** (no blob
is read) and no event model validated. A purged event is read from its tombstone's
skeleton (the fields retention keeps, :data:`~underway.events.SKELETON`). An event of an
older version than this code's is decoded whole, through its upcasters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...codec import event_where
from ...errors import IntegrityError, KeyUnavailable
from ...events import EVENT_TYPES, full_data, is_tombstone, placed, read_tombstone
from ...journal import Journal
from ...store.base import Store, StoredEvent
from ...store.journal import RUN_BATCH


class Fact(NamedTuple):
    """One event as a figure reads it: its seq, time, type and data (blob references in
    it unresolved; for a purged event, the skeleton retention kept). A tuple: many are
    made, and cheaply."""

    seq: int
    at: float
    type: str
    data: Mapping[str, Any]

    def text(self, name: str, default: str = "") -> str:
        """The field ``name`` as a string (``default`` when absent, null or not text)."""
        value = self.data.get(name)
        return value if isinstance(value, str) else default

    def number(self, name: str) -> float:
        """The field ``name`` as a number (0 when absent or not a number)."""
        value = self.data.get(name)
        return float(value) if isinstance(value, int | float) and \
            not isinstance(value, bool) else 0.0


@dataclass(frozen=True, slots=True)
class Reading:
    """What a computation read, so that its cost is plain: ``runs`` journals, ``events``
    events of the ``kinds`` named (``payload_bytes`` of stored payloads; no blob is read),
    in ``seconds``. ``unreadable`` names runs left out of the figures: a journal that
    could not be decoded (audit it) or that is encrypted with no key here to open it."""

    runs: int
    events: int
    payload_bytes: int
    blobs: int
    """Blobs read: only where an event's whole data was stored as one (its fields
    together passed the codec's threshold), never the large values inside events."""
    kinds: tuple[str, ...]
    seconds: float
    unreadable: tuple[str, ...] = ()


@dataclass(slots=True)
class Tally:
    """Counts what a read costs as it goes; :meth:`done` freezes them into a
    :class:`Reading`."""

    kinds: tuple[str, ...]
    runs: int = 0
    events: int = 0
    payload_bytes: int = 0
    blobs: int = 0
    unreadable: list[str] = field(default_factory=list)
    began: float = field(default_factory=time.perf_counter)

    def done(self) -> Reading:
        """What was read, and how long it took since this tally began."""
        return Reading(self.runs, self.events, self.payload_bytes, self.blobs, self.kinds,
                       time.perf_counter() - self.began, tuple(self.unreadable))


def created_runs(
    store: Store, tenant_id: str, *, flow: str | None, since: float | None,
    until: float | None, labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Ids of the tenant's runs (of ``flow``, with ``labels``) created at or after
    ``since`` and before ``until``: pages of the run index, read on its (tenant,
    created_at) index."""
    found: list[str] = []
    after: tuple[float, str] | None = None
    while True:
        page = store.list_runs(tenant_id, flow=flow, since=since, until=until,
                               limit=RUN_BATCH, after=after, labels=labels or None)
        found += [row.run_id for row in page]
        if len(page) < RUN_BATCH:
            return found
        after = (page[-1].created_at, page[-1].run_id)


def read_facts(
    store: Store, tenant_id: str, run_ids: Sequence[str], kinds: Sequence[str], tally: Tally,
) -> Iterator[tuple[str, list[Fact]]]:
    """Each readable run of ``run_ids`` with its events of ``kinds``, in order (a run
    whose journal cannot be read is named in ``tally.unreadable`` instead)."""
    journal = Journal(store)
    for i in range(0, len(run_ids), RUN_BATCH):
        chunk = run_ids[i:i + RUN_BATCH]
        found = store.events_by_type(tenant_id, chunk, kinds)
        opened: dict[str, list[Fact | _Wrapped]] = {}
        for run_id in chunk:
            stored = found.get(run_id, [])
            try:
                opened[run_id] = [_open(store, journal, tenant_id, run_id, s)
                                  for s in stored]
            except _UNREADABLE:
                tally.unreadable.append(run_id)
                continue
            tally.events += len(stored)
            tally.payload_bytes += sum(len(s.payload) for s in stored)
        wrapped = {f.blob for facts in opened.values() for f in facts
                   if isinstance(f, _Wrapped)}
        blobs = store.get_blobs(tenant_id, sorted(wrapped)) if wrapped else {}
        tally.blobs += len(blobs)
        for run_id, facts in opened.items():
            try:
                done = [f if isinstance(f, Fact) else f.unwrap(store, tenant_id, blobs)
                        for f in facts]
            except _UNREADABLE:
                tally.unreadable.append(run_id)
                continue
            tally.runs += 1
            yield run_id, done


_UNREADABLE = (IntegrityError, KeyUnavailable, ValueError, KeyError, TypeError)
"""What reading a journal that cannot be decoded here raises."""


@dataclass(frozen=True, slots=True)
class _Wrapped:
    """An event whose whole data was stored as one blob (its fields together passed the
    codec's threshold): the blob is read in the batch of its run's chunk."""

    seq: int
    at: float
    type: str
    blob: str
    run_id: str

    def unwrap(self, store: Store, tenant_id: str, blobs: Mapping[str, bytes]) -> Fact:
        stored = blobs.get(self.blob)
        if stored is None:
            raise IntegrityError(f"blob {self.blob} is referenced but missing from the store")
        data = json.loads(store.codec.open_blob(stored, self.blob, tenant_id))
        if not isinstance(data, dict):
            raise IntegrityError(f"blob {self.blob} does not hold an event's data")
        return Fact(self.seq, self.at, self.type, full_data(data, self.run_id))


def _open(store: Store, journal: Journal, tenant_id: str, run_id: str,
          s: StoredEvent) -> Fact | _Wrapped:
    payload = s.payload
    # The envelope as :func:`underway.codec.split_event` reads it, without its detour
    # through the encoding detection of ``json.loads`` on bytes (this is the hot path).
    cut = payload.find(b"\x00")
    if cut == 0 and is_tombstone(payload):
        t = read_tombstone(payload)
        return Fact(s.seq, 0.0 if t.at is None else t.at, t.type, t.kept)
    try:
        env = placed(_JSON.decode((payload if cut < 0 else payload[:cut]).decode("utf-8")),
                     s.seq, s.type)
    except ValueError:
        raise IntegrityError(f"run {run_id}: event at seq {s.seq} does not carry its own "
                             "seq and type") from None
    cls = EVENT_TYPES.get(s.type)
    if cls is None:
        raise IntegrityError(f"run {run_id}: unknown event type {s.type!r} at seq {s.seq}")
    if env.get("v", 1) != cls.VERSION:
        rec = journal.decode(tenant_id, run_id, [s])[0]
        return Fact(s.seq, rec.at, s.type, rec.event.model_dump(mode="json"))
    if cut > 0:
        data = store.codec.open_json(payload[cut + 1:],
                                     event_where(tenant_id, run_id, s.seq, s.type))
    else:
        data = env.get("data")
    if not isinstance(data, dict):
        raise IntegrityError(f"run {run_id}: event at seq {s.seq} has no data object")
    at = float(env["at"])
    if len(data) == 1 and isinstance(data.get("$blob"), str):
        return _Wrapped(s.seq, at, s.type, data["$blob"], run_id)
    return Fact(s.seq, at, s.type, full_data(data, run_id))


_JSON = json.JSONDecoder()
