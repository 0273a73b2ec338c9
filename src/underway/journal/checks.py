"""Verifying a run's journal: its hash chain and sequence, tombstones, sealed payloads and
the blobs they refer to, the run row's head, and the checkpoint (:class:`JournalChecks`, a
part of :class:`~underway.journal.Journal`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..codec import ENCRYPTED, Codec, event_where, split_event
from ..errors import KeyUnavailable
from ..events import JSON, genesis_hash, is_tombstone, link_hash, read_tombstone
from ..store.base import CoreStore, RunRecord, StoredEvent
from ..store.features import privacy
from . import checkpoint
from .blobs import BlobReader, broken_blob, envelope_problem

__all__ = ["JournalChecks", "Verification"]

CHECKPOINT_RACES = 3
"""How many times a checkpoint found wrong is checked again when a writer moved it meanwhile."""


@dataclass(frozen=True, slots=True)
class Verification:
    """The result of verifying one run's hash chain."""

    tenant_id: str
    run_id: str
    ok: bool
    events: int
    bad_seq: int | None = None
    reason: str = ""


class JournalChecks:
    """What :class:`~underway.journal.Journal` verifies: :meth:`verify` a run, or
    :meth:`verify_events` events already loaded."""

    if TYPE_CHECKING:
        store: CoreStore

        @property
        def codec(self) -> Codec: ...

        def _finding(
            self, tenant_id: str, run_id: str, row: tuple[int, bytes] | None,
            stored: Sequence[StoredEvent], digests: Sequence[str | None],
        ) -> checkpoint.Finding | None: ...

    def verify(self, tenant_id: str, run_id: str) -> Verification:
        """Check the run's hash chain, sequence and tail against its run row."""
        return self.verify_events(
            tenant_id, run_id,
            self.store.load_events(tenant_id, run_id), self.store.get_run(tenant_id, run_id),
        )

    def verify_events(
        self,
        tenant_id: str,
        run_id: str,
        stored: Sequence[StoredEvent],
        row: RunRecord | None,
    ) -> Verification:
        """Check the events of a run, as loaded, and the run's row.

        Whatever the database holds, this reports and never raises on bad data. An audit must
        get past one corrupt run to the next.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            stored: Every event of the run.
            row: The run's row, if any.
        """

        def bad(seq: int | None, reason: str) -> Verification:
            return Verification(tenant_id, run_id, False, len(stored), seq, reason)

        fetch = BlobReader(self.store, tenant_id)

        if not stored:
            if row is None:
                return bad(None, "no such run")
            # A run is created together with its first event.
            return bad(1, f"the run row exists (last seq {row.last_seq}) but the journal "
                       "has no events")
        seen: set[str] = set()
        prev = genesis_hash(tenant_id, run_id)
        for expected_seq, s in enumerate(stored, start=1):
            if s.seq != expected_seq:
                return bad(expected_seq, f"event {expected_seq} is missing (found seq {s.seq!r})")
            if isinstance(s.payload, bytes) and is_tombstone(s.payload):
                problem = _tombstone_problem(s, prev)
                if problem is not None:
                    return bad(s.seq, problem)
                prev = s.hash
                continue
            if not isinstance(s.payload, bytes) or not isinstance(s.type, str) \
                    or link_hash(prev, s.seq, s.type, s.payload) != s.hash:
                return bad(s.seq, "hash does not match content and predecessor")
            problem = self._payload_problem(tenant_id, run_id, s, fetch, seen)
            if problem is not None:
                return bad(s.seq, problem)
            prev = s.hash
        if row is None:
            return bad(1, "events exist but the run row is missing")
        last_seq = row.last_seq
        if type(last_seq) is not int or last_seq < 1:
            return bad(1, f"run row says last seq {last_seq!r}; a run's journal starts at 1")
        # The row records the journal's head as of the run's last hand-back; events after it
        # are a step in flight (or interrupted by a crash) and are checked by the chain alone.
        if last_seq > len(stored):
            return bad(
                len(stored) + 1,
                f"run row says last seq {last_seq}, journal ends at {len(stored)}",
            )
        if stored[last_seq - 1].hash != row.last_hash:
            return bad(last_seq, "event differs from the head the run row recorded")
        if last_seq < len(stored) and row.status in ("completed", "failed", "cancelled"):
            return bad(last_seq + 1, f"events follow the end of a {row.status} run")
        purge = self._purge_problem(row, stored)
        if purge is not None:
            return bad(*purge)
        found = self._audit_checkpoint(tenant_id, run_id, stored)
        if found is not None:
            return bad(found.seq, found.reason)
        return Verification(tenant_id, run_id, True, len(stored))

    def _purge_problem(
        self, row: RunRecord, stored: Sequence[StoredEvent]
    ) -> tuple[int, str] | None:
        """What is wrong with the tombstones of a run, if it has any: a purge replaces every
        payload of a finished run, in one transaction that records it."""
        stones = [is_tombstone(s.payload) for s in stored]
        if not any(stones):
            return None
        if not all(stones):
            first = stones.index(not stones[0]) + 1
            return first, ("a run is purged whole or not at all, and this one is purged in "
                           "part")
        if row.status not in ("completed", "failed", "cancelled"):
            return 1, f"tombstones in a run that is {row.status}, not finished"
        records = privacy(self.store).purged_runs(row.tenant_id, run_id=row.run_id, limit=1)
        if not records or records[0].events != len(stored):
            return 1, "tombstones without the record of the run's purge"
        return None

    def _audit_checkpoint(
        self, tenant_id: str, run_id: str, stored: Sequence[StoredEvent]
    ) -> checkpoint.Finding | None:
        """What is wrong with the run's checkpoint row now, or was found wrong by a worker
        before (a ``CheckpointRefused`` in the journal); None when nothing is."""
        envelopes = self._envelopes(stored)
        if envelopes is None:
            # Purged payloads: there is nothing to check a checkpoint by (a purge removes
            # the run's checkpoints with its payloads).
            return None
        stored = list(stored)
        for _ in range(CHECKPOINT_RACES):
            row = self.store.load_checkpoint(tenant_id, run_id)
            digests = [checkpoint.commitment(env) for env in envelopes]
            found = self._finding(tenant_id, run_id, row, stored, digests)
            if found is None or found.benign:
                break
            # A worker may have committed events and their checkpoint since the events
            # were read: check again with them.
            more = self.store.load_events(tenant_id, run_id, after_seq=len(stored))
            parsed = self._envelopes(more)
            if not more or parsed is None:
                return found
            stored += more
            envelopes += parsed
        else:
            return found
        for s in stored:
            if s.type == "CheckpointRefused":
                try:
                    data = self.codec.event_data(s.payload, event_where(tenant_id, run_id,
                                                                        s.seq, s.type))
                except Exception:
                    data = {"checkpoint_seq": "?", "reason": ENCRYPTED}
                data = data if isinstance(data, dict) else {}
                return checkpoint.Finding(
                    s.seq, f"a worker refused the checkpoint at seq {data.get('checkpoint_seq')}"
                           f" here: {data.get('reason')}"
                )
        return None

    def _envelopes(self, stored: Sequence[StoredEvent]) -> list[JSON] | None:
        """The stored events' envelopes as stored (blob references left as they are, sealed
        data left sealed: the checkpoint digest an event commits to is readable without
        keys); None when one cannot be read."""
        out: list[JSON] = []
        for s in stored:
            try:
                out.append(split_event(s.payload)[0])
            except Exception:
                return None
        return out

    def _payload_problem(
        self, tenant_id: str, run_id: str, s: StoredEvent,
        fetch: Callable[[list[str]], dict[str, bytes]], seen: set[str],
    ) -> str | None:
        """What is wrong with a (correctly chained) event's content, if anything. Sealed
        data is opened when the key is here (which proves it belongs at this seq of this
        run) and the blobs it refers to are checked; without the key only the envelope
        is checked."""
        problem = envelope_problem(s)
        if problem is not None:
            return problem
        tenant = tenant_id

        def content(key: str, stored: bytes) -> bytes:
            return self.codec.open_blob(stored, key, tenant)

        try:
            data = self.codec.event_data(s.payload,
                                         event_where(tenant_id, run_id, s.seq, s.type))
        except KeyUnavailable:
            return None  # without the key, the chain is all that can be checked
        except Exception as exc:
            return (f"sealed payload does not open under its key here: altered, or moved "
                    f"from another place ({exc})")
        broken = broken_blob(data, fetch, seen, content=content,
                             chunked=lambda key, row: self.codec.read_large(
                                 key, row, fetch, tenant))
        if broken is not None:
            return f"refers to blob {broken}, which is missing or altered"
        return None


def _tombstone_problem(s: StoredEvent, prev: str) -> str | None:
    """What is wrong with the tombstone stored at ``s`` after a chain that reached
    ``prev`` (see :mod:`underway.events._tombstone`)."""
    try:
        t = read_tombstone(s.payload)
    except ValueError as exc:
        return str(exc)
    return t.problem(seq=s.seq, type=s.type, prev=prev, hash=s.hash)
