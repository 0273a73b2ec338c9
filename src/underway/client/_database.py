"""The client's database transport: runs read and written in the store itself, with the
journal's codec (:class:`~underway.client.Client` over a store or a database URL)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from .. import events as ev
from ..clock import Clock
from ..codec import ENCRYPTED, Codec, signal_where, stream_where
from ..errors import ConfigurationError, KeyUnavailable, RunNotFound
from ..events import JSON, canonical_json
from ..flow import Flow
from ..journal import Journal, Verification
from ..journal.state import ANSWER_SIGNAL, APPROVAL_SIGNAL, Recorded, RunState
from ..labels import LabelValue, label_filter
from ..redaction import Redactor, RunRedactors
from ..store._offload import run_io
from ..store.base import (
    FINAL,
    ApproverRecord,
    ConsentRecord,
    NewRun,
    RunRecord,
    SignalRecord,
    Store,
)
from ..store.streams import StreamDelta
from ._activity import Activity, activity
from ._bulk import BulkItem, BulkResult, RunFilter, _Acting, _Plan, run_each
from ._forking import Fork, fork_run
from ._labels import shown_labels
from ._options import StartOptions
from ._pages import RunEvent, RunPage, decode_cursor, encode_cursor
from ._requests import PendingRequest, readable_row, request_of, sealed_request
from ._starting import new_run

WAIT_S = 1.0
"""The longest a reader of a live stream waits for a bell before it looks again."""


class DatabaseTransport:
    """Runs in a store: what :class:`~underway.client.Client` reads and writes there.

    Args:
        store: The store.
        journal: Encodes and decodes the runs' events.
        clock: Stamps starts and signals.
        flows: The flows whose code the client has, by name (shared with the client).
        strict: Refuse a flow that is not in ``flows`` (an engine's client).
        owner: Who the client belongs to, for messages (``client``, ``engine``).
    """

    where = "the database"
    remote = False

    def __init__(self, store: Store, journal: Journal, clock: Clock,
                 flows: dict[str, Flow[Any, Any]], *, strict: bool,
                 owner: str = "client") -> None:
        self.store = store
        self.journal = journal
        self.clock = clock
        self.flows = flows
        self.strict = strict
        self.owner = owner
        self._learned = RunRedactors()

    @property
    def codec(self) -> Codec:
        """How payloads are encoded, sealed and opened."""
        return self.journal.codec

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def tenant(self, tenant_id: str) -> str:
        """Any tenant of the store."""
        return tenant_id

    def settles_signed_only(self) -> bool:
        """Never: the client's own setting decides, as the deployment's workers do."""
        return False

    # -- writes -------------------------------------------------------------------------
    def prepare_start(self, flow: Flow[Any, Any] | str, input: JSON | BaseModel,
                      options: StartOptions) -> NewRun:
        """The run a start would create (see :meth:`Client.prepare_start`)."""
        name = flow.name if isinstance(flow, Flow) else flow
        code = flow if isinstance(flow, Flow) else self.flows.get(name)
        if code is None and self.strict:
            raise ConfigurationError(
                f"flow {name!r} is not registered with this {self.owner}; known: "
                f"{sorted(self.flows)}"
            )
        return new_run(self.journal, code, name, input, options, now=self.clock.now(),
                       run_id=options.run_id or str(uuid.uuid4()))

    def start(self, flow: Flow[Any, Any] | str, input: JSON | BaseModel,
              options: StartOptions) -> tuple[str, bool]:
        """Create the run, or find it by its idempotency key."""
        rec, created = self.store.create_run(self.prepare_start(flow, input, options))
        return rec.run_id, created

    def signal(self, tenant_id: str, run_id: str, name: str, payload: JSON,
               signal_id: str | None, sender: str | None) -> bool:
        """Seal and append the signal to the run's inbox."""
        return self.store.send_signal(
            self.signal_record(tenant_id, run_id, name, payload, signal_id, sender))

    def signal_record(self, tenant_id: str, run_id: str, name: str, payload: JSON,
                      signal_id: str | None, sender: str | None, *,
                      row: RunRecord | None = None) -> SignalRecord:
        """The inbox row of the signal, sealed, not yet written (``row``: the run's, read
        just now; else it is read)."""
        row = row if row is not None else self.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        signal_id = signal_id or str(uuid.uuid4())
        return SignalRecord(
            tenant_id, run_id, signal_id, name,
            self.codec.seal(canonical_json(payload),
                            signal_where(tenant_id, signal_id, name, row.subject)),
            sender, self.clock.now(),
        )

    def control(self, tenant_id: str, run_id: str, action: str, payload: dict[str, JSON],
                signal_id: str | None, by: str) -> bool:
        """The control signal ``action`` (``underway.cancel``...) in the run's inbox."""
        return self.signal(tenant_id, run_id, action, payload, signal_id, by)

    def deliver(self, tenant_id: str, decision: JSON) -> bool:
        """The decision in its run's inbox, as an approval or an answer."""
        assert isinstance(decision, dict)
        kind = decision.get("decision")
        name = ANSWER_SIGNAL if kind in ("answer", "resolve") else APPROVAL_SIGNAL
        # Deduplicated by the whole signed decision, not by its nonce alone: a tampered
        # copy sent first must not shut out the genuine decision.
        digest = hashlib.sha256(canonical_json(decision)).hexdigest()
        return self.signal(tenant_id, str(decision["run_id"]), name, decision,
                           f"decision:{digest}", str(decision["approver_id"]))

    def fork(self, tenant_id: str, run_id: str, *, at_seq: int, step: str | None,
             state_patch: JSON, by: str, reason: str) -> Fork:
        """Fork the run (:func:`~underway.client._forking.fork_run`)."""
        return fork_run(self.store, self.journal, self.clock, self.flows, run_id,
                        at_seq=at_seq, step=step, state_patch=state_patch, by=by,
                        reason=reason, tenant_id=tenant_id)

    def record_consent(self, tenant_id: str, subject: str, purpose: str, state: str,
                       by: str, reference: str | None) -> ConsentRecord:
        """Append the consent record."""
        return self.store.record_consent(ConsentRecord(
            tenant_id, subject, purpose, state, reference, by, self.clock.now()))

    def bulk(self, client: _Acting, plan: _Plan, filter: RunFilter, *, dry_run: bool,
             page_size: int, on_item: Callable[[BulkItem], None] | None) -> BulkResult:
        """Each selected run read and acted on through ``client``, one at a time."""
        return run_each(client, plan, filter, dry_run=dry_run, page_size=page_size,
                        on_item=on_item)

    # -- reads --------------------------------------------------------------------------
    def get_run(self, tenant_id: str, run_id: str) -> RunRecord | None:
        """The run's row, its error opened when it can be here."""
        row = self.store.get_run(tenant_id, run_id)
        return None if row is None else readable_row(self.codec, row)

    def list_runs(self, tenant_id: str, *, limit: int, cursor: str | None,
                  id_prefix: str | None = None, labels: Any = None,
                  **filters: Any) -> RunPage:
        """A page of rows, read one past ``limit`` to know whether another follows."""
        after = decode_cursor(cursor) if cursor is not None else None
        rows = self.store.list_runs(tenant_id, after=after, limit=limit + 1,
                                    id_prefix=id_prefix, labels=label_filter(labels) or None,
                                    **filters)
        rows = [readable_row(self.codec, r) for r in rows]
        if len(rows) <= limit:
            return RunPage(rows, None)
        last = rows[limit - 1]
        return RunPage(rows[:limit], encode_cursor(last.created_at, last.run_id))

    def events(self, tenant_id: str, run_id: str, after: int,
               limit: int | None) -> list[RunEvent]:
        """The run's stored events, decoded (a sealed one as ``Encrypted``)."""
        stored = self.store.load_events(tenant_id, run_id, after)
        if not stored and (after == 0 or self.store.get_run(tenant_id, run_id) is None):
            raise RunNotFound(tenant_id, run_id)
        if limit is not None:
            stored = stored[:max(limit, 0)]
        records = self.journal.decode_readable(tenant_id, run_id, stored)
        return [RunEvent(seq, at, event, s.hash)
                for s, (seq, at, event) in zip(stored, records, strict=True)]

    def state(self, tenant_id: str, run_id: str) -> RunState:
        """The run's state, from its checkpoint on."""
        return self.journal.load(tenant_id, run_id)

    def states_at(self, tenant_id: str, run_id: str, seq: int
                  ) -> tuple[RunState, Recorded, RunState]:
        """The states around the event at ``seq``, folded once."""
        return self.journal.states_at(tenant_id, run_id, seq)

    def history(self, tenant_id: str, run_id: str) -> list[Recorded]:
        """Every event of the run, decoded."""
        return self.journal.history(tenant_id, run_id)

    def verify(self, tenant_id: str, run_id: str) -> Verification:
        """The run's hash chain, sequence and tail checked against its row."""
        return self.journal.verify(tenant_id, run_id)

    def pending_requests(self, tenant_id: str, limit: int) -> list[PendingRequest]:
        """The requests of waiting and escalated runs (a sealed run's, ``[encrypted]``)."""
        found = []
        for status in ("waiting", "escalated"):
            rows = self.store.list_runs(tenant_id, status=status, limit=limit)
            try:  # the states of the page together; with a sealed run, each alone
                states = self.journal.load_many(tenant_id, [r.run_id for r in rows])
            except KeyUnavailable:
                states = {}
            for row in rows:
                try:
                    request = request_of(states.get(row.run_id)
                                         or self.journal.load(tenant_id, row.run_id))
                except KeyUnavailable:
                    request = sealed_request(row)
                if request is not None:
                    found.append(request)
        return sorted(found, key=lambda r: (r.expires_at, r.run_id))[:limit]

    def pending_request(self, tenant_id: str, run_id: str) -> PendingRequest | None:
        """The run's request; a resolution carries the escalated call's arguments."""
        try:
            state = self.journal.load(tenant_id, run_id)
        except KeyUnavailable:
            row = self.get_run(tenant_id, run_id)
            if row is None:
                raise RunNotFound(tenant_id, run_id) from None
            return sealed_request(row)
        request = request_of(state)
        if request is None or request.kind != "resolution" or request.key is None:
            return request
        for rec in self.journal.history(tenant_id, run_id):
            if isinstance(rec.event, ev.ToolStarted) and rec.event.key == request.key:
                return replace(request, args=rec.event.args,
                               sensitive_fields=tuple(rec.event.sensitive_fields or ()),
                               secret_fields=tuple(rec.event.secret_fields or ()))
        return request

    def redactor(self, tenant_id: str, run_id: str, reveal: bool) -> Redactor:
        """A redactor that learned every event of the run (see :meth:`Client.redactor`)."""
        def newer(after: int) -> list[tuple[int, ev.Event]]:
            if after == 0:  # an unknown run raises RunNotFound
                return [(e.seq, e.event) for e in self.events(tenant_id, run_id, 0, None)]
            stored = self.store.load_events(tenant_id, run_id, after)  # a run it learned of
            return [(s, e) for s, _, e in self.journal.decode_readable(tenant_id, run_id,
                                                                       stored)]
        return self._learned.redactor((tenant_id, run_id), reveal, newer)

    def activity(self, tenant_id: str, *, since: float, days: int,
                 hourly: bool) -> Activity:
        """Counted from the runs table and the journal."""
        return activity(self.store, self.journal, tenant_id, since=since, days=days,
                        hourly=hourly)

    def run_labels(self, tenant_id: str, run_ids: Sequence[str],
                   reveal: bool) -> dict[str, dict[str, LabelValue]]:
        """One query on the label index."""
        found = self.store.run_labels(tenant_id, list(run_ids))
        return {r: shown_labels(rows, reveal=reveal) for r, rows in found.items()}

    def consents(self, tenant_id: str, subject: str) -> dict[str, ConsentRecord]:
        """The latest record per purpose."""
        return self.store.current_consents(tenant_id, subject)

    def consent_history(self, tenant_id: str, subject: str,
                        purpose: str | None) -> list[ConsentRecord]:
        """Every record, oldest first."""
        return self.store.consent_history(tenant_id, subject, purpose=purpose)

    def runs_of_subject(self, tenant_id: str, subject: str,
                        limit: int | None) -> list[RunRecord]:
        """The subject's runs, oldest first."""
        return self.store.runs_of_subject(tenant_id, subject, limit=limit)

    def approver(self, tenant_id: str, approver_id: str) -> ApproverRecord | None:
        """The approver as registered in the tenant."""
        return self.store.get_approver(tenant_id, approver_id)

    # -- live streams -------------------------------------------------------------------
    def read_stream(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> list[StreamDelta]:
        """The run's live deltas after ``after``, opened with the codec."""
        row = self.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        out = []
        for offset, d in self.store.read_stream(tenant_id, run_id, after=after, limit=limit):
            text = self.codec.open_text(
                d.data, stream_where(tenant_id, run_id, d.key, d.attempt, row.subject))
            delta = {"type": "encrypted"} if text == ENCRYPTED else json.loads(text)
            out.append(StreamDelta(offset, d.key, d.step, d.index, d.attempt, delta,
                                   d.written_at))
        return out

    def stream_page(self, tenant_id: str, run_id: str, after: int,
                    limit: int) -> tuple[list[StreamDelta], bool]:
        """The deltas after ``after``, and whether the run has finished with none left.
        Every delta is written before the run's last commit, so one more read after the
        row says it finished finds any that landed in between."""
        found = self.read_stream(tenant_id, run_id, after, limit)
        if found:
            return found, False
        row = self.get_run(tenant_id, run_id)
        if row is None or row.status not in FINAL:
            return [], False
        found = self.read_stream(tenant_id, run_id, after, limit)
        return found, not found

    async def stream(self, tenant_id: str, run_id: str, after: int, follow: bool,
                     limit: int) -> AsyncIterator[StreamDelta]:
        """The deltas after ``after`` as they are written, read on the store's I/O
        threads; a write rings the bell on PostgreSQL, elsewhere the reader polls."""
        bell = await run_io(self.store, self.store.stream_bell)
        try:
            while True:
                found, ended = await run_io(self.store, self.stream_page, tenant_id, run_id,
                                            after, limit)
                for d in found:
                    after = d.offset
                    yield d
                if found:
                    continue
                if ended or not follow:
                    return
                await bell.wait(run_id, WAIT_S)
        finally:
            await bell.close()
