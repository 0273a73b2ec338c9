"""Reading and writing a run's journal: encoding, the hash chain, recovery, verification."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import cast

from ..codec import UNSEALED, Codec, checkpoint_where, event_where, split_event
from ..errors import ConfigurationError, IntegrityError, KeyUnavailable, RunNotFound
from ..events import (
    JSON,
    CheckpointRefused,
    Encrypted,
    PayloadPurged,
    RunEvent,
    StepStarted,
    event_hash,
    from_envelope,
    is_tombstone,
    placed,
    read_tombstone,
)
from ..events._union import stored_envelope
from ..store.base import CoreStore, NewRun, StoredEvent
from ..store.observation import ObservationStore
from . import checkpoint
from .blobs import BlobReader, blob_refs
from .checks import CHECKPOINT_RACES, JournalChecks
from .checks import Verification as Verification
from .state import Recorded, RunState, apply

log = logging.getLogger("underway.journal")

KNOWN_FOR = 86_400.0
"""Seconds a journal takes a blob it committed to be stored still, and so does not send
it again with an event that refers to it. Retention's blob collector spares every blob
written less than this long (and a day more: see :mod:`underway.privacy.retention._blobs`) before
it began, so a blob is never referred to without being sent when it may be gone."""


class Journal(JournalChecks):
    """Encodes events for a store and folds them back into :class:`RunState`.

    ``codec``: how payloads are encoded, sealed and opened; by default one like the
    store's (``store.codec``: its threshold and sealer, followed at each use, so payloads
    are sealed once encryption is turned on for the store even after this journal was
    made), with a blob cache of this journal's own."""

    def __init__(self, store: CoreStore, codec: Codec | None = None) -> None:
        self.store = store
        self._codec = codec
        self._like: tuple[Codec, Codec] | None = None
        self._known: dict[tuple[str, str], float] = {}

    @property
    def codec(self) -> Codec:
        """The codec this journal encodes, seals and opens with."""
        if self._codec is not None:
            return self._codec
        base = self.store.codec
        if self._like is None or self._like[0] is not base:
            self._like = (base, Codec(threshold=base.threshold, sealer=base.sealer,
                                      chunk_bytes=base.chunk_bytes,
                                      max_value_bytes=base.max_value_bytes))
        return self._like[1]

    # -- writing ------------------------------------------------------------------------
    def encode(
        self,
        tenant_id: str,
        run_id: str,
        pending: Sequence[tuple[int, float, RunEvent]],
        prev_hash: str,
        blobs: dict[str, bytes],
        subject: str | None = None,
    ) -> list[StoredEvent]:
        """Stored form of ``pending`` events of a run, chained from ``prev_hash``.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            pending: The events, as (seq, time, event).
            prev_hash: The chain's hash before them.
            blobs: Receives the blobs made, by address.
            subject: The run's data subject, whose key seals them.
        """
        return self._encode(tenant_id, run_id, pending, prev_hash, blobs, None, subject)[0]

    def encode_checkpointed(
        self,
        state: RunState,
        pending: Sequence[tuple[int, float, RunEvent]],
        prev_hash: str,
        blobs: dict[str, bytes],
    ) -> tuple[list[StoredEvent], tuple[int, bytes]]:
        """Stored form of ``pending`` as :meth:`encode` gives it, with a checkpoint.

        The last event commits to the checkpoint.

        Args:
            state: The run's state, folded through the last pending event.
            pending: The events, as (seq, time, event).
            prev_hash: The chain's hash before them.
            blobs: Receives the blobs made, by address.

        Returns:
            The stored events, and the checkpoint as (seq, stored bytes).
        """
        stored, ckpt = self._encode(
            state.tenant_id, state.run_id, pending, prev_hash, blobs, state, state.subject
        )
        assert ckpt is not None
        return stored, (state.seq, ckpt)

    def _encode(
        self,
        tenant_id: str,
        run_id: str,
        pending: Sequence[tuple[int, float, RunEvent]],
        prev_hash: str,
        blobs: dict[str, bytes],
        state: RunState | None,
        subject: str | None,
    ) -> tuple[list[StoredEvent], bytes | None]:
        out: list[StoredEvent] = []
        ckpt = None
        codec = self.codec
        for seq, at, event in pending:
            # The row holds the seq and type; the link hashes them with the bytes.
            event_type, env = stored_envelope(event, at=at, run_id=run_id)
            if state is not None and seq == pending[-1][0]:
                if state.seq != seq:
                    raise IntegrityError(
                        f"run {state.run_id}: checkpoint of seq {state.seq} cannot be "
                        f"committed by the event at seq {seq}"
                    )
                ckpt = checkpoint.encode(
                    codec, state, prev_hash, blobs,
                    checkpoint_where(tenant_id, run_id, seq, subject),
                )
                env[checkpoint.DIGEST_KEY] = checkpoint.digest(ckpt)
            # The chain covers the stored (possibly sealed) bytes. Unsealed, the identity
            # is never read: none is made (no work per event when encryption is off).
            where = (UNSEALED if codec.sealer is None
                     else event_where(tenant_id, run_id, seq, event_type, subject))
            payload = codec.encode_event(env, blobs, where)
            prev_hash = event_hash(prev_hash, seq, event_type, payload)
            out.append(StoredEvent(seq, event_type, payload, prev_hash))
        return out, ckpt

    def unknown_blobs(self, tenant_id: str, blobs: dict[str, bytes]) -> dict[str, bytes]:
        """The subset of ``blobs`` not known to be stored for this tenant: not committed
        by this journal in the last :data:`KNOWN_FOR` seconds."""
        if not blobs:
            return {}
        since = time.monotonic() - KNOWN_FOR
        known = self._known
        return {k: v for k, v in blobs.items() if known.get((tenant_id, k), since) <= since}

    def remember(self, tenant_id: str, blobs: dict[str, bytes]) -> None:
        """Note that ``blobs`` are committed (call only after the commit)."""
        if not blobs:
            return
        if len(self._known) > 200_000:
            self._known.clear()
        now = time.monotonic()
        self._known.update(((tenant_id, k), now) for k in blobs)

    # -- reading ------------------------------------------------------------------------
    def decode(
        self, tenant_id: str, run_id: str, stored: Sequence[StoredEvent]
    ) -> list[Recorded]:
        """Decode stored events of a run, upcasting old versions.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            stored: The stored events.

        Raises:
            KeyUnavailable: A sealed event cannot be opened here.
        """
        return [rec for rec, _ in self._decode(tenant_id, run_id, stored)]

    def decode_readable(
        self, tenant_id: str, run_id: str, stored: Sequence[StoredEvent]
    ) -> list[tuple[int, float, RunEvent | Encrypted]]:
        """(seq, time, event) of stored events of a run, for a reader.

        An event whose payload cannot be opened here (no key, or a destroyed one) is an
        :class:`~underway.events.Encrypted` with its type and time, never an error.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            stored: The stored events.

        Raises:
            IntegrityError: An event does not open under a key that is here.
        """
        try:
            return [(r.seq, r.at, r.event) for r in self.decode(tenant_id, run_id, stored)]
        except KeyUnavailable:
            pass
        out: list[tuple[int, float, RunEvent | Encrypted]] = []
        for s in stored:
            try:
                rec = self.decode(tenant_id, run_id, [s])[0]
                out.append((rec.seq, rec.at, rec.event))
            except KeyUnavailable:
                out.append((s.seq, _time_of(s), Encrypted(event_type=s.type)))
        return out

    def _decode(
        self, tenant_id: str, run_id: str, stored: Sequence[StoredEvent],
        fetch: BlobReader | None = None,
    ) -> list[tuple[Recorded, str | None]]:
        """Decoded events, each with the checkpoint digest its envelope commits to.

        Decoded last first: a conversation only grows, so the last event's copy of it holds
        every node the earlier copies refer to, and reading it first reads them all in a
        few queries. The error raised is still the one of the first event that fails.
        """
        fetch = fetch or BlobReader(self.store, tenant_id)
        out: list[tuple[Recorded, str | None] | Exception] = []
        for s in reversed(stored):
            try:
                if is_tombstone(s.payload):
                    out.append(_purged(s))
                    continue
                env = self.codec.decode_event(
                    s.payload, fetch, event_where(tenant_id, run_id, s.seq, s.type)
                )
                try:
                    env = placed(env, s.seq, s.type)
                except ValueError:
                    raise IntegrityError(
                        f"event at seq {s.seq} does not carry its own seq and type") from None
                rec = Recorded(s.seq, float(env["at"]), from_envelope(env, run_id))
                out.append((rec, checkpoint.commitment(env)))
            except Exception as exc:
                out.append(exc)
        out.reverse()
        for item in out:
            if isinstance(item, Exception):
                raise item
        return cast(list[tuple[Recorded, str | None]], out)

    def load(self, tenant_id: str, run_id: str, *, use_checkpoint: bool = True) -> RunState:
        """The run's state: latest checkpoint plus the fold of the events after it.

        A checkpoint the journal does not vouch for is ignored (see
        :mod:`underway.journal.checkpoint`). The state is then folded from the whole journal and
        a warning is logged.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            use_checkpoint: Start from the checkpoint; False folds the whole journal.
        """
        return self._loaded(self._load(tenant_id, run_id, use_checkpoint))[0]

    def load_head(
        self, tenant_id: str, run_id: str
    ) -> tuple[RunState, str, CheckpointRefused | None]:
        """The run's state, the hash of its last event (the next append chains from it),
        and, when its checkpoint was refused, the event a writer should journal about it."""
        return self._loaded(self._load(tenant_id, run_id, True))

    def _loaded(
        self, found: tuple[RunState, str, CheckpointRefused | None]
    ) -> tuple[RunState, str, CheckpointRefused | None]:
        """``found``, once the key its run's data subject is sealed under is at hand (a
        load runs off the event loop; the commits that follow then read nothing)."""
        self.codec.forget_large()
        if found[0].subject is not None:
            self.codec.prepare(found[0].tenant_id, found[0].subject)
        return found

    def load_created(self, new: NewRun) -> tuple[RunState, str]:
        """The state and head of the run ``new`` created, folded from its first event as
        it was stored, with the blobs it was stored with at hand: what :meth:`load_head`
        would read back right after the start, read from nothing (an eager start)."""
        self.codec.prepare(new.tenant_id)
        fetch = BlobReader(self.store, new.tenant_id)
        fetch._read.update(new.blobs)
        [(rec, _)] = self._decode(new.tenant_id, new.run_id, [new.first_event], fetch)
        state = RunState(tenant_id=new.tenant_id, run_id=new.run_id)
        apply(state, rec)
        found = self._loaded((state, new.first_event.hash, None))
        return found[0], found[1]

    def load_many(self, tenant_id: str, run_ids: Sequence[str]) -> dict[str, RunState]:
        """The states of many runs of a tenant, by run: their checkpoints and tails read
        together in few queries (:meth:`~underway.store.journal.JournalStore.
        load_checkpoints`), each checkpoint checked against its journal as :meth:`load`
        checks it. A run without a checkpoint the journal vouches for is folded alone from
        its journal; a run that does not exist is absent."""
        self.codec.prepare(tenant_id)
        rows = self.store.load_checkpoints(tenant_id, run_ids)
        # The blobs the checkpoints refer to, read for all of them at once.
        fetch = BlobReader(self.store, tenant_id)
        refs: list[str] = []
        for run_id, row in rows.items():
            try:
                refs += blob_refs(self.codec.open_json(
                    row.state, checkpoint_where(tenant_id, run_id, row.seq)))
            except Exception:
                continue  # a row that does not open is judged, and refused, below
        fetch.prefetch(refs)
        out: dict[str, RunState] = {}
        for run_id in run_ids:
            found = rows.get(run_id)
            state = None
            if found is not None and found.tail:
                trusted, records = self._trusted(tenant_id, run_id,
                                                 (found.seq, found.state), found.tail, fetch)
                if trusted is not None:
                    for rec in records:
                        apply(trusted, rec)
                state = trusted
            if state is None:
                try:
                    state = self.load(tenant_id, run_id)
                except RunNotFound:
                    continue
            out[run_id] = state
        return out

    def trusted_checkpoint(self, tenant_id: str, run_id: str) -> RunState | None:
        """The run's checkpointed state, only when the journal vouches for it."""
        row = self.store.load_checkpoint(tenant_id, run_id)
        if row is None:
            return None
        tail = self.store.load_events(tenant_id, run_id, after_seq=max(row[0] - 1, 0))
        return self._trusted(tenant_id, run_id, row, tail)[0]

    def _trusted(
        self, tenant_id: str, run_id: str, row: tuple[int, bytes], tail: list[StoredEvent],
        fetch: BlobReader | None = None, *, past: bool = False,
    ) -> tuple[RunState | None, list[Recorded]]:
        """The state ``row`` holds, when ``tail`` (the events from the row's seq on) shows
        that the journal committed to it, and the decoded events after it. A ``past``
        checkpoint (one a newer one replaced, read for a state at its place in the run)
        is not refused for being older than the latest."""
        # The tail's conversation holds the row's: one reader serves both.
        fetch = fetch or BlobReader(self.store, tenant_id)
        decoded = self._decode(tenant_id, run_id, tail, fetch)
        at = tail[0] if tail and tail[0].seq == row[0] else None
        later = [] if past else [rec.seq for rec, digest in decoded
                                 if digest is not None and rec.seq > row[0]]
        content = self._content(tenant_id, run_id, row, fetch)
        found = checkpoint.check(
            tenant_id, run_id, row, content, at,
            decoded[0][1] if at is not None else None, max(later, default=row[0]),
        )
        if found is not None or not isinstance(content, dict):
            return None, []
        try:
            state = RunState.from_json(content)
        except (TypeError, ValueError):
            # A vouched-for checkpoint this version cannot read (a record's shape
            # changed): only a cache, so the state is folded from the journal instead.
            return None, []
        return state, [rec for rec, _ in decoded[1:]]

    def _prefetched(self, tenant_id: str, run_id: str, stored: Sequence[StoredEvent],
                    row: tuple[int, bytes]) -> BlobReader:
        """A blob reader that already read, in one query, the blobs ``stored`` and the
        checkpoint ``row`` refer to directly (a decode would ask for them one event at a
        time)."""
        fetch = BlobReader(self.store, tenant_id)
        refs: list[str] = []
        # A checkpoint that does not open is judged, and refused, later.
        with contextlib.suppress(Exception):
            refs += blob_refs(self.codec.open_json(
                row[1], checkpoint_where(tenant_id, run_id, row[0])))
        for s in stored:
            if _plain_without_refs(s.payload):
                continue  # nothing to read ahead: not parsed twice
            try:
                refs += blob_refs(self.codec.event_data(
                    s.payload, event_where(tenant_id, run_id, s.seq, s.type)))
            except Exception:  # an event that does not open is judged when decoded
                continue
        fetch.prefetch(refs)
        return fetch

    def _content(
        self, tenant_id: str, run_id: str, row: tuple[int, bytes],
        fetch: BlobReader | None = None,
    ) -> JSON | Exception:
        """A checkpoint row's decoded content, or why it cannot be decoded."""
        try:
            return self.codec.decode(row[1], fetch or BlobReader(self.store, tenant_id),
                                     checkpoint_where(tenant_id, run_id, row[0]))
        except Exception as exc:  # a cache that cannot be read is simply not used
            return exc

    def _load(
        self, tenant_id: str, run_id: str, use_checkpoint: bool
    ) -> tuple[RunState, str, CheckpointRefused | None]:
        # A load runs off the event loop: the tenant's sealing key is read now, if need be,
        # so that the commits that follow read nothing.
        self.codec.prepare(tenant_id)
        row = self.store.load_checkpoint(tenant_id, run_id) if use_checkpoint else None
        for _ in range(CHECKPOINT_RACES):
            if row is not None:
                tail = self.store.load_events(tenant_id, run_id, after_seq=max(row[0] - 1, 0))
                state, records = self._trusted(tenant_id, run_id, row, tail)
                if state is not None:
                    for rec in records:
                        apply(state, rec)
                    return state, tail[-1].hash, None
            stored = self.store.load_events(tenant_id, run_id)
            if not stored:
                raise RunNotFound(tenant_id, run_id)
            decoded = self._decode(tenant_id, run_id, stored)
            found = self._finding(tenant_id, run_id, row, stored, [d for _, d in decoded])
            if found is None or found.benign or not use_checkpoint:
                break
            # A writer that committed between reading the row and the events (a reader
            # beside a worker) left a newer row: read it and try again.
            again = self.store.load_checkpoint(tenant_id, run_id)
            if again == row:
                break
            row = again
        state = RunState(tenant_id=tenant_id, run_id=run_id)
        for rec, _ in decoded:
            apply(state, rec)
        if found is None or found.benign or not use_checkpoint:
            return state, stored[-1].hash, None
        log.warning(
            "run %s in tenant %r: checkpoint refused (%s); its state was folded from the "
            "whole journal. Run `underway audit verify %s` and look for who changed the "
            "checkpoints table.", run_id, tenant_id, found.reason, run_id,
        )
        # A missing checkpoint forged nothing: it is logged (and reported by the audit while
        # it is missing), not journaled.
        refused = None if row is None else CheckpointRefused(
            checkpoint_seq=found.seq, reason=found.reason
        )
        return state, stored[-1].hash, refused

    def _finding(
        self,
        tenant_id: str,
        run_id: str,
        row: tuple[int, bytes] | None,
        stored: Sequence[StoredEvent],
        digests: Sequence[str | None],
    ) -> checkpoint.Finding | None:
        """What is wrong with the run's checkpoint row, given its whole journal."""
        latest = max((s.seq for s, d in zip(stored, digests, strict=True) if d), default=0)
        if row is None:
            return checkpoint.check(tenant_id, run_id, None, None, None, None, latest)
        seq = row[0]
        at = stored[seq - 1] if 1 <= seq <= len(stored) and stored[seq - 1].seq == seq else None
        return checkpoint.check(
            tenant_id, run_id, row, self._content(tenant_id, run_id, row), at,
            digests[seq - 1] if at is not None else None, latest,
        )

    def step_attempt(self, tenant_id: str, run_id: str, seq: int) -> list[Recorded]:
        """The events of the step attempt in progress at ``seq``.

        They run from its last ``StepStarted`` to ``seq``; empty when no step started. They are
        read backwards in growing windows. So it costs the attempt's length, not the journal's.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            seq: Where the attempt is in progress.
        """
        window = 16
        while True:
            after = max(seq - window, 0)
            stored = [e for e in self.store.load_events(tenant_id, run_id, after_seq=after)
                      if e.seq <= seq]
            records = self.decode(tenant_id, run_id, stored)
            for i in range(len(records) - 1, -1, -1):
                if isinstance(records[i].event, StepStarted):
                    return records[i:]
            if after == 0:
                return []
            window *= 4

    def history(self, tenant_id: str, run_id: str) -> list[Recorded]:
        """Every event of the run, decoded."""
        stored = self.store.load_events(tenant_id, run_id)
        if not stored:
            raise RunNotFound(tenant_id, run_id)
        return self.decode(tenant_id, run_id, stored)

    def states_at(
        self, tenant_id: str, run_id: str, seq: int
    ) -> tuple[RunState, Recorded, RunState]:
        """The run's state just before its event at ``seq``, that event, and the state after.

        One fold, from the newest checkpoint before ``seq`` that the journal vouches for:
        the current one or one it replaced (they are kept). Only the events from it through
        ``seq`` are read, so a state deep in a long run costs one checkpoint interval.
        Without such a checkpoint (a run older than kept checkpoints, or one refused), it
        starts from the first event.

        Args:
            tenant_id: The run's tenant.
            run_id: The run.
            seq: The event's seq.
        """
        # Kept checkpoints are the observation role's, beside the core (every backend has it).
        kept = cast(ObservationStore | None,
                    self.store if hasattr(self.store, "checkpoint_before") else None)
        found = kept.checkpoint_before(tenant_id, run_id, seq) if kept is not None else None
        if found is not None and found.tail and found.tail[-1].seq == seq:
            fetch = self._prefetched(tenant_id, run_id, found.tail, (found.seq, found.state))
            start, records = self._trusted(tenant_id, run_id, (found.seq, found.state),
                                           found.tail, fetch, past=True)
            if start is not None:
                return states_around(start, records, seq)
        stored = self.store.load_events(tenant_id, run_id)
        if not stored:
            raise RunNotFound(tenant_id, run_id)
        upto = [s for s in stored if s.seq <= seq]
        return states_around(RunState(tenant_id=tenant_id, run_id=run_id),
                       self.decode(tenant_id, run_id, upto), seq)


def _plain_without_refs(payload: bytes) -> bool:
    """Whether a stored event is unsealed canonical JSON that names no blob (a sealed one
    is opened to be looked into)."""
    return b"\x00" not in payload and b'"$blob"' not in payload \
        and b'"$chain"' not in payload


def _time_of(s: StoredEvent) -> float:
    """The time in a stored event's envelope (readable whether or not its data is sealed;
    0 when the envelope cannot be read)."""
    try:
        at = split_event(s.payload)[0].get("at")
    except (ValueError, AttributeError, RecursionError):
        return 0.0
    return float(at) if isinstance(at, int | float) else 0.0


def _purged(s: StoredEvent) -> tuple[Recorded, None]:
    """What a reader meets in place of an event whose payload retention purged."""
    try:
        t = read_tombstone(s.payload)
    except ValueError as exc:
        raise IntegrityError(f"event at seq {s.seq}: {exc}") from None
    if t.seq != s.seq:
        raise IntegrityError(f"event at seq {s.seq} does not carry its own seq")
    event = PayloadPurged(event_type=t.type, kept=t.kept)
    return Recorded(s.seq, 0.0 if t.at is None else t.at, event), None


def states_around(
    state: RunState, records: Sequence[Recorded], seq: int
) -> tuple[RunState, Recorded, RunState]:
    """Fold ``records`` onto ``state`` (changed in place) up to the event at ``seq``: the
    state before it, the event, the state after it (:meth:`Journal.states_at`, and a client
    over HTTP folding the events it read).

    Args:
        state: Where the fold starts.
        records: The events from there on, in order.
        seq: The event's seq.

    Raises:
        ConfigurationError: No event of ``records`` is at ``seq``.
    """
    for rec in records:
        if rec.seq == seq:
            before = state.clone()
            return before, rec, apply(state, rec)
        apply(state, rec)
    last = records[-1].seq if records else state.seq
    raise ConfigurationError(
        f"run {state.run_id} has no event at seq {seq} (its journal ends at {last})")
