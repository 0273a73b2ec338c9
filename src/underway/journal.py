"""Reading and writing a run's journal: encoding, the hash chain, recovery, verification."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .codec import Codec, blob_key
from .errors import IntegrityError, RunNotFound
from .events import JSON, Event, canonical_json, chain_hash, envelope, from_envelope, genesis_hash
from .state import Recorded, RunState, apply
from .store.base import RunRecord, Store, StoredEvent


@dataclass(frozen=True, slots=True)
class Verification:
    """The result of verifying one run's hash chain."""

    tenant_id: str
    run_id: str
    ok: bool
    events: int
    bad_seq: int | None = None
    reason: str = ""


class Journal:
    """Encodes events for a store and folds them back into :class:`RunState`."""

    def __init__(self, store: Store, codec: Codec | None = None) -> None:
        self.store = store
        self.codec = codec or Codec()
        self._known: set[tuple[str, str]] = set()

    # -- writing ------------------------------------------------------------------------
    def encode(
        self,
        tenant_id: str,
        pending: Sequence[tuple[int, float, Event]],
        prev_hash: str,
        blobs: dict[str, bytes],
    ) -> list[StoredEvent]:
        """Stored form of ``pending`` (seq, time, event), chained from ``prev_hash``."""
        out: list[StoredEvent] = []
        for seq, at, event in pending:
            env = envelope(event, seq=seq, at=at)
            raw = canonical_json(env)
            # A small event has no part over the threshold; '"$' would need escaping.
            if len(raw) > self.codec.threshold or b'"$' in raw:
                env["data"] = self.codec.externalize(env["data"], blobs)
                raw = canonical_json(env)
            payload = self.codec.seal(raw)
            prev_hash = chain_hash(prev_hash, payload)
            out.append(StoredEvent(seq, str(env["type"]), payload, prev_hash))
        return out

    def encode_checkpoint(self, state: RunState, blobs: dict[str, bytes]) -> bytes:
        """Stored form of a checkpoint of ``state``."""
        return self.codec.encode(state.to_json(), blobs)

    def unknown_blobs(self, tenant_id: str, blobs: dict[str, bytes]) -> dict[str, bytes]:
        """The subset of ``blobs`` not yet known to be stored for this tenant."""
        return {k: v for k, v in blobs.items() if (tenant_id, k) not in self._known}

    def remember(self, tenant_id: str, blobs: dict[str, bytes]) -> None:
        """Note that ``blobs`` are committed (call only after the commit)."""
        if len(self._known) > 200_000:
            self._known.clear()
        self._known.update((tenant_id, k) for k in blobs)

    # -- reading ------------------------------------------------------------------------
    def decode(self, tenant_id: str, stored: Sequence[StoredEvent]) -> list[Recorded]:
        """Decode stored events (upcasting old versions)."""

        def fetch(keys: list[str]) -> dict[str, bytes]:
            return self.store.get_blobs(tenant_id, keys)

        out = []
        for s in stored:
            env = self.codec.decode(s.payload, fetch)
            if not isinstance(env, dict) or env.get("seq") != s.seq:
                raise IntegrityError(f"event at seq {s.seq} does not carry its own seq")
            out.append(Recorded(s.seq, float(env["at"]), from_envelope(env)))
        return out

    def load(self, tenant_id: str, run_id: str, *, use_checkpoint: bool = True) -> RunState:
        """The run's state: latest checkpoint plus the fold of the events after it."""
        return self._load(tenant_id, run_id, use_checkpoint)[0]

    def load_head(self, tenant_id: str, run_id: str) -> tuple[RunState, str]:
        """The run's state and the hash of its last event (the next append chains from it)."""
        state, head = self._load(tenant_id, run_id, True)
        if head is None:
            last = self.store.load_events(tenant_id, run_id, after_seq=state.seq - 1)
            if not last or last[0].seq != state.seq:
                raise IntegrityError(
                    f"run {run_id}: checkpoint at seq {state.seq} but no such event"
                )
            head = last[0].hash
        return state, head

    def _load(
        self, tenant_id: str, run_id: str, use_checkpoint: bool
    ) -> tuple[RunState, str | None]:
        start = RunState(tenant_id=tenant_id, run_id=run_id)
        if use_checkpoint:
            ckpt = self.store.load_checkpoint(tenant_id, run_id)
            if ckpt is not None:
                data = self.codec.decode(
                    ckpt[1], lambda keys: self.store.get_blobs(tenant_id, keys)
                )
                start = RunState.from_json(data)
        tail = self.store.load_events(tenant_id, run_id, after_seq=start.seq)
        if start.seq == 0 and not tail:
            raise RunNotFound(tenant_id, run_id)
        for rec in self.decode(tenant_id, tail):
            apply(start, rec)
        return start, tail[-1].hash if tail else None

    def history(self, tenant_id: str, run_id: str) -> list[Recorded]:
        """Every event of the run, decoded."""
        stored = self.store.load_events(tenant_id, run_id)
        if not stored:
            raise RunNotFound(tenant_id, run_id)
        return self.decode(tenant_id, stored)

    # -- verification -------------------------------------------------------------------
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
        """Check ``stored`` (every event of the run, as loaded) and the run's ``row``.

        Whatever the database holds, this reports and never raises on bad data: an
        audit must get past one corrupt run to the next.
        """

        def bad(seq: int | None, reason: str) -> Verification:
            return Verification(tenant_id, run_id, False, len(stored), seq, reason)

        def fetch(keys: list[str]) -> dict[str, bytes]:
            return self.store.get_blobs(tenant_id, keys)

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
            if not isinstance(s.payload, bytes) or chain_hash(prev, s.payload) != s.hash:
                return bad(s.seq, "hash does not match content and predecessor")
            if self.codec.cipher is None:
                problem = _payload_problem(s, fetch, seen)
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
        return Verification(tenant_id, run_id, True, len(stored))


def _payload_problem(
    s: StoredEvent, fetch: Callable[[list[str]], dict[str, bytes]], seen: set[str]
) -> str | None:
    """What is wrong with a (correctly chained, unencrypted) event's content, if anything."""
    try:
        env = json.loads(s.payload)
    except (ValueError, RecursionError):
        return "payload is not valid JSON"
    if not isinstance(env, dict):
        return "payload is not a JSON object"
    if _exact(env.get("seq")) != _exact(s.seq) or env.get("type") != s.type:
        return "stored seq/type differ from the hashed payload"
    broken = _broken_blob(env, fetch, seen)
    if broken is not None:
        return f"refers to blob {broken}, which is missing or altered"
    return None


def _exact(value: object) -> tuple[type, object]:
    """``value`` with its type, so that ``true`` never passes for ``1``."""
    return type(value), value


def _broken_blob(
    value: JSON, fetch: Callable[[list[str]], dict[str, bytes]], seen: set[str]
) -> str | None:
    """The first blob reachable from ``value`` that is missing, fails its content hash, or
    holds something the codec never writes.

    The chain hash covers an event's bytes, and those hold only blob references; a large
    value edited in the blobs table is caught here. ``seen`` spares re-reading blobs (a
    conversation's chain nodes) that earlier events of the run share.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(v)
            continue
        if not isinstance(v, dict):
            continue
        if "$lit" in v and len(v) == 1:
            inner = v["$lit"]
            stack.extend(inner.values() if isinstance(inner, dict) else [inner])
            continue
        chain = "$chain" in v and len(v) == 2
        key = v.get("$chain") if chain else v.get("$blob") if len(v) == 1 else None
        if not isinstance(key, str):
            stack.extend(v.values())
            continue
        if key in seen:
            continue
        raw = fetch([key]).get(key)
        if raw is None or blob_key(raw) != key:
            return key
        try:
            node = json.loads(raw)
            if chain:
                stack.append(node["x"])
                if node["p"] is not None:
                    stack.append({"$chain": node["p"], "n": 0})
            else:
                stack.append(node)
        except (ValueError, TypeError, KeyError, RecursionError):
            return key
        seen.add(key)
    return None
