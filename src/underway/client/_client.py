"""The client: everything done to runs from outside a worker, with no flow code needed."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ValidationError
from typing_extensions import Unpack

from .. import events as ev
from .. import inputs
from ..clock import Clock, SystemClock
from ..codec import Codec, signal_where
from ..control import RESERVED_PREFIX, resolution_of, resumption_of
from ..errors import AmbiguousRunId, ConfigurationError, KeyUnavailable, RunNotFound
from ..events import JSON, canonical_json
from ..flow import Flow
from ..guard.approvals import ApprovalCheck, SignedDecision, verify_decision
from ..guard.approvals.decision import REASON_TEXT
from ..journal import Journal, Verification
from ..journal.state import ANSWER_SIGNAL, APPROVAL_SIGNAL, Recorded, RunState
from ..labels import LabelValue, label_filter
from ..redaction import Redactor, RunRedactors
from ..store import connect
from ..store.base import CoreStore, NewRun, RunRecord, SignalRecord, Store, whole
from ._activity import Activity, activity
from ._bulk import Bulk
from ._consent import Consents
from ._deciding import Deciding
from ._forking import Forks
from ._labels import Labels
from ._options import StartKeywords, StartOptions
from ._pages import ChildRun, RunEvent, RunPage, decode_cursor, encode_cursor
from ._requests import PendingRequest, readable_row, request_of, sealed_request, sealed_state
from ._settling import Settling
from ._starting import check_start, new_run
from ._streams import Streams


class Client(Bulk, Consents, Deciding, Forks, Labels, Settling, Streams):
    """Starts, steers and reads runs: what an operator, the CLI, an HTTP API or another service
    does. It needs no flow code and runs no step; workers (an :class:`~underway.Engine` driven by
    a :class:`~underway.Worker` or :class:`~underway.Runner`) do that. Every method takes
    ``tenant_id`` (default ``"default"``).

    Args:
        store: A store you opened (and close); :meth:`Client.connect` opens one from a URL
            and closes it with the client.
        flows: Flows whose code this process has. Runs of those are checked when started
            (input, steps, declared signals). Others are started by name with their raw
            input, checked by the first worker that runs them.
        clock: What stamps starts and signals (default: the system's clock).
        codec: How payloads are encoded (default: the store's; sealed when encryption is on).
        signed_resolutions: Settle escalations and dead runs only with signed resolutions, as the
            deployment's workers do (``[approvals] signed_resolutions``). :meth:`resolve` and
            :meth:`resume` then refuse at once (:class:`~underway.errors.SignedResolutionRequired`).
    """

    def __init__(
        self,
        store: Store,
        *,
        flows: Iterable[Flow[Any, Any]] = (),
        clock: Clock | None = None,
        codec: Codec | None = None,
        signed_resolutions: bool = False,
    ) -> None:
        self._store = store
        self._journal = Journal(store, codec)
        self.clock: Clock = clock or SystemClock()
        """The clock that stamps starts and signals."""
        self.flows: dict[str, Flow[Any, Any]] = {f.name: f for f in flows}
        """Flows whose code this client has, by name."""
        self._strict = bool(self.flows)
        self._owns_store = False
        self._owner = "client"
        self._learned = RunRedactors()
        self.signed_resolutions = signed_resolutions
        """Whether unsigned resolutions and resumes are refused up front."""

    @classmethod
    def connect(
        cls, url: str, *, migrate: bool = True, flows: Iterable[Flow[Any, Any]] = (),
        clock: Clock | None = None, codec: Codec | None = None,
        signed_resolutions: bool = False,
    ) -> Client:
        """A client on the store at ``url``; :meth:`close` closes the store.

        Args:
            url: ``sqlite:///path.db``, ``postgresql://...`` or ``memory://``.
            migrate: Migrate the store's schema first.
            flows: As for :class:`Client`.
            clock: As for :class:`Client`.
            codec: As for :class:`Client`.
            signed_resolutions: As for :class:`Client`.
        """
        client = cls(connect(url, migrate=migrate), flows=flows, clock=clock, codec=codec,
                     signed_resolutions=signed_resolutions)
        client._owns_store = True
        return client

    @classmethod
    def _for_executor(
        cls, store: CoreStore, journal: Journal, clock: Clock,
        flows: dict[str, Flow[Any, Any]],
        *, signed_resolutions: bool = False,
    ) -> Client:
        """The client an engine steers runs with: its store, journal, clock and registry
        (shared, so a flow registered later is known here too); an unknown flow is an
        error, never a start by name. ``signed_resolutions``: its guard's. A client
        reaches every feature, so the store must have them all."""
        client = cls.__new__(cls)
        client._store = whole(store, by="an engine's client")
        client._journal, client.clock = journal, clock
        client.flows, client._strict, client._owns_store = flows, True, False
        client._owner, client._learned = "engine", RunRedactors()
        client.signed_resolutions = signed_resolutions
        return client

    @property
    def store(self) -> Store:
        """The store this client reads and writes."""
        return self._store

    @property
    def codec(self) -> Codec:
        """How this client encodes, seals and opens payloads (by default its store's)."""
        return self._journal.codec

    def close(self) -> None:
        """Close the store, when :meth:`connect` opened it."""
        if self._owns_store:
            self._store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- starting runs ------------------------------------------------------------------
    def start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        options: StartOptions | None = None,
        **keywords: Unpack[StartKeywords],
    ) -> tuple[str, bool]:
        """Create a run (or find the one with this idempotency key): ``(run_id, created)``.

        When this client has the flow's code the input is checked now. When it does not, the raw
        input is journaled. The first worker that has the flow checks it before any step runs,
        and fails the run (``InvalidInput``) when it does not match.

        Args:
            flow: A :class:`~underway.Flow` or a flow's name.
            input: The run's input.
            options: How the run is started (tenant, idempotency key, queue, times, principal,
                data subject, lineage...). Give its fields as keywords, or a ready one here.

        Raises:
            ConfigurationError: Wrong input (nothing is stored), or keywords beside ``options``.
        """
        rec, created = self._store.create_run(
            self.prepare_start(flow, input, options=options, **keywords))
        return rec.run_id, created

    def prepare_start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        options: StartOptions | None = None,
        **keywords: Unpack[StartKeywords],
    ) -> NewRun:
        """The run :meth:`start` would create (input checked when the flow is known, first
        event encoded), for a caller that creates it inside a transaction of its own.

        Args:
            flow: As for :meth:`start`.
            input: As for :meth:`start`.
            options: As for :meth:`start`.

        Raises:
            InvalidInput: Input no run can hold, naming the argument: a NUL or lone surrogate in a
                string, NaN or an infinity, nesting deeper than :data:`~underway.inputs.MAX_DEPTH`.
        """
        name = flow.name if isinstance(flow, Flow) else flow
        opts = check_start(name, input, options, keywords)
        code = flow if isinstance(flow, Flow) else self.flows.get(name)
        if code is None and self._strict:
            raise ConfigurationError(
                f"flow {name!r} is not registered with this {self._owner}; known: "
                f"{sorted(self.flows)}"
            )
        return new_run(self._journal, code, name, input, opts, now=self.clock.now(),
                       run_id=opts.run_id or str(uuid.uuid4()))

    # -- steering runs ------------------------------------------------------------------
    def signal(
        self,
        run_id: str,
        name: str,
        payload: JSON = None,
        *,
        tenant_id: str = "default",
        signal_id: str | None = None,
        sender: str | None = None,
    ) -> bool:
        """Deliver a signal, once per ``signal_id``; False when it was a duplicate.

        A name the run's flow does not declare (``Flow(signals=[...])``) is refused with
        :class:`ConfigurationError`, unless the run waits for it now: no step would read it.

        Args:
            run_id: The run.
            name: The signal's name.
            payload: What the signal carries.
            tenant_id: The run's tenant.
            signal_id: The signal's id (default: a new one).
            sender: Who sends it.
        """
        if name.startswith(RESERVED_PREFIX):
            raise ConfigurationError(
                f"signal names starting with 'underway.' are reserved ({name!r}); use "
                "cancel() or resolve() for those"
            )
        self.check_signal(run_id, name, tenant_id=tenant_id)
        return self._send(run_id, name, payload, tenant_id, signal_id, sender)

    def declared_signals(self, run_id: str, *, tenant_id: str = "default") -> frozenset[str] | None:
        """The signal names the run's flow declares (None: it declares none, or the run was
        started by name and no worker has checked it yet). The flow's code answers when
        this client has it; otherwise the declaration journaled with the run."""
        return self._declared(self.get_run(run_id, tenant_id=tenant_id))

    def _declared(self, row: RunRecord) -> frozenset[str] | None:
        flow = self.flows.get(row.flow)
        if flow is not None:
            return flow.signals
        journaled = self._journal.load(row.tenant_id, row.run_id).signals
        return None if journaled is None else frozenset(journaled)

    def check_signal(self, run_id: str, name: str, *, tenant_id: str = "default") -> None:
        """Refuse a signal ``name`` the run's flow would not take.

        Args:
            run_id: The run.
            name: The signal's name.
            tenant_id: The run's tenant.

        Raises:
            ConfigurationError: The flow declares its signals and ``name`` is none of them, nor
                the signal the run waits for now.
            RunNotFound: There is no such run.
        """
        row = self.get_run(run_id, tenant_id=tenant_id)
        if name == row.waiting_signal:
            return
        declared = self._declared(row)
        if declared is not None and name not in declared:
            raise ConfigurationError(
                f"run {run_id} of flow {row.flow!r} takes only the signals its flow declares "
                f"({', '.join(sorted(declared)) or 'none'}); {name!r} is not one of them, so "
                "no step would read it. Send a declared name, or add it to Flow(signals=...)"
            )

    def _send(
        self, run_id: str, name: str, payload: JSON, tenant_id: str, signal_id: str | None,
        sender: str | None,
    ) -> bool:
        inputs.text("run_id", run_id, max_length=inputs.MAX_NAME)
        inputs.text("name", name, max_length=inputs.MAX_NAME)
        if signal_id is not None:
            inputs.text("signal_id", signal_id, max_length=inputs.MAX_NAME)
        inputs.json_value("payload", payload)
        row = self.get_run(run_id, tenant_id=tenant_id)
        signal_id = signal_id or str(uuid.uuid4())
        return self._store.send_signal(SignalRecord(
            tenant_id, run_id, signal_id, name,
            self._journal.codec.seal(canonical_json(payload),
                                     signal_where(tenant_id, signal_id, name, row.subject)),
            sender, self.clock.now(),
        ))

    def submit_decision(self, decision: JSON, *, tenant_id: str = "default") -> bool:
        """Deliver a signed approval decision, answer or resolution (built and signed by the
        approver, e.g. with ``underway approvals approve``) to its run.

        What can be checked without the run is checked here, and a decision that could
        never pass raises :class:`ConfigurationError` naming the problem: a malformed or
        incomplete decision, one for another tenant, a resolution whose answer is not one,
        an approver not registered (or revoked) in the tenant, a signature that does not
        verify with the approver's registered key, a decision already expired. An unknown
        run raises :class:`RunNotFound`. The worker verifies the decision again against the
        request the run waits on, immediately before anything changes. Returns True when
        delivered, False only when the same decision was already submitted.
        """
        try:
            d = SignedDecision.model_validate(decision)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'decision'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigurationError(f"not a valid signed decision: {problems}") from None
        if d.tenant_id != tenant_id:
            raise ConfigurationError(
                f"the decision is for tenant {d.tenant_id!r} but was submitted to tenant "
                f"{tenant_id!r}"
            )
        if d.decision == "resolve" and resolution_of(d.answer) is None \
                and resumption_of(d.answer) is None:
            raise ConfigurationError(
                "a resolve decision's answer must be {\"resolution\": \"succeeded\" | "
                f"\"failed\" | \"retry\", \"result\": ...}} or {{\"resolution\": "
                f"\"resume\", \"step\": ...}}, not {d.answer!r}"
            )
        self.get_run(d.run_id, tenant_id=tenant_id)
        # The decision checked against itself: who signed it and with what key, its expiry.
        # Whether it answers the request the run waits on is the worker's check.
        check = ApprovalCheck(
            request_id=d.request_id, run_id=d.run_id, tenant_id=tenant_id, tool=d.tool,
            args_hash=d.args_hash, required_role=None, expires_at=d.expires_at,
        )
        approver = self._store.get_approver(tenant_id, d.approver_id)
        reason = verify_decision(d, check=check, approver=approver, now=self.clock.now())
        if reason is not None:
            raise ConfigurationError(
                f"decision {d.nonce!r} by {d.approver_id!r} on request {d.request_id!r} of run "
                f"{d.run_id} would be refused: {REASON_TEXT[reason]} ({reason})"
            )
        name = ANSWER_SIGNAL if d.decision in ("answer", "resolve") else APPROVAL_SIGNAL
        signed = d.model_dump(mode="json")
        # Deduplicated by the whole signed decision, not by its nonce alone: a tampered
        # copy sent first must not shut out the genuine decision.
        digest = hashlib.sha256(canonical_json(signed)).hexdigest()
        return self._send(d.run_id, name, signed, tenant_id, f"decision:{digest}",
                          d.approver_id)

    # -- reading runs -------------------------------------------------------------------
    def get_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord:
        """The run's row (status, step, flow, times); :class:`RunNotFound` when there is
        no such run in the tenant."""
        row = self._store.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        return self._readable(row)

    def _readable(self, row: RunRecord) -> RunRecord:
        return readable_row(self._journal.codec, row)

    def find_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord:
        """The run whose id is ``run_id``, or else the one run whose id starts with it:
        :class:`RunNotFound` when none does, :class:`~underway.errors.AmbiguousRunId`
        (naming them) when several do."""
        row = self._store.get_run(tenant_id, run_id)
        if row is not None:
            return self._readable(row)
        if not run_id:
            raise RunNotFound(tenant_id, run_id)
        found = self._store.list_runs(tenant_id, id_prefix=run_id, limit=6)
        if not found:
            raise RunNotFound(tenant_id, run_id)
        if len(found) > 1:
            raise AmbiguousRunId(tenant_id, run_id, sorted(r.run_id for r in found))
        return self._readable(found[0])

    def state(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """The run's current state, folded from its journal (from its checkpoint on)."""
        return self._journal.load(tenant_id, run_id)

    def readable_state(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """The run's current state (:meth:`state`) — or, when its journal is encrypted and
        cannot be opened here, what its row tells (flow, status, step, times) with its
        input, state and result ``[encrypted]``."""
        try:
            return self.state(run_id, tenant_id=tenant_id)
        except KeyUnavailable:
            return sealed_state(self.get_run(run_id, tenant_id=tenant_id))

    def tainted_by(self, run: str | RunRecord, *, tenant_id: str = "default") -> list[str] | None:
        """Where the untrusted content that shaped a completed run's result came from
        (:attr:`~underway.events.RunCompleted.tainted_by`; empty: none did), read from the
        end of its journal; ``run`` is its id or its row. None while the run has not
        completed, or when its end cannot be read here (encrypted without its key, purged).
        """
        row = run if isinstance(run, RunRecord) else self.get_run(run, tenant_id=tenant_id)
        if row.status != "completed":
            return None
        # Its completion is among the last few events its row counts.
        tail = self.events(row.run_id, tenant_id=row.tenant_id,
                           after=max(row.last_seq - _TAIL, 0))
        for e in reversed(tail):
            if isinstance(e.event, ev.RunCompleted):
                return list(e.event.tainted_by)
            if isinstance(e.event, ev.Encrypted | ev.PayloadPurged):
                return None
        try:
            s = self.state(row.run_id, tenant_id=row.tenant_id)
        except KeyUnavailable:
            return None
        return None if s.purged else list(s.tainted_by)

    def state_at(
        self, run_id: str, seq: int, *, tenant_id: str = "default"
    ) -> tuple[RunState, Recorded, RunState]:
        """The run's state just before its event at ``seq``, that event, and the state after it,
        folded once (from the run's checkpoint when that precedes ``seq``).

        Args:
            run_id: The run.
            seq: The event's seq.
            tenant_id: The run's tenant.

        Raises:
            RunNotFound: There is no such run.
            ConfigurationError: The run has no event at ``seq``.
        """
        if seq < 1:
            raise ConfigurationError(f"a run's events start at seq 1, not {seq}")
        return self._journal.states_at(tenant_id, run_id, seq)

    def history(self, run_id: str, *, tenant_id: str = "default") -> list[Recorded]:
        """Every event of the run, decoded, in order (each with ``seq``, ``at``,
        ``event``); :class:`~underway.errors.KeyUnavailable` when payloads are encrypted
        and cannot be opened here (:meth:`events` shows them as ``[encrypted]``)."""
        return self._journal.history(tenant_id, run_id)

    def events(
        self, run_id: str, *, tenant_id: str = "default", after: int = 0,
        limit: int | None = None,
    ) -> list[RunEvent]:
        """Every event of the run, decoded, with its chain hash.

        An event whose payload is encrypted and cannot be opened here is an
        :class:`~underway.events.Encrypted`: its type and time, the payload ``[encrypted]``.
        An unknown run raises :class:`RunNotFound`.

        Args:
            run_id: The run.
            tenant_id: The run's tenant.
            after: Only events with ``seq`` above it.
            limit: Only the first ``limit`` of them (None: all).
        """
        stored = self._store.load_events(tenant_id, run_id, after)
        if not stored and (after == 0 or self._store.get_run(tenant_id, run_id) is None):
            raise RunNotFound(tenant_id, run_id)
        if limit is not None:
            stored = stored[:max(limit, 0)]
        records = self._journal.decode_readable(tenant_id, run_id, stored)
        return [RunEvent(seq, at, event, s.hash)
                for s, (seq, at, event) in zip(stored, records, strict=True)]

    def children(self, run_id: str, *, tenant_id: str = "default") -> list[ChildRun]:
        """The runs this run started with ``ctx.start``, in the order it started them."""
        state = self.state(run_id, tenant_id=tenant_id)
        found = []
        for child_id, child in sorted(state.children.items(), key=lambda c: c[1].seq):
            row = self._store.get_run(tenant_id, child_id)
            found.append(ChildRun(
                child_id, child.flow, child.key, child.detached,
                row.status if row is not None else None, child.ended, child.result,
                child.error,
            ))
        return found

    def verify(self, run_id: str, *, tenant_id: str = "default") -> Verification:
        """Check the run's hash chain, sequence and tail against its row."""
        return self._journal.verify(tenant_id, run_id)

    def list_runs(
        self, *, tenant_id: str = "default", status: str | None = None,
        flow: str | None = None, since: float | None = None, until: float | None = None,
        limit: int = 100, cursor: str | None = None, updated_since: float | None = None,
        updated_until: float | None = None, search: str | None = None,
        labels: Mapping[str, LabelValue] | None = None,
    ) -> RunPage:
        """A page of the tenant's runs, newest first. Times are epoch seconds.

        Args:
            tenant_id: The tenant.
            status: Only runs with this status.
            flow: Only runs of this flow.
            since: Only runs created at or after it.
            until: Only runs created before it.
            limit: The most runs on the page.
            cursor: The previous page's ``next_cursor``, for the next page. Pages follow on
                exactly, whatever runs are created meanwhile.
            updated_since: Only runs last updated at or after it.
            updated_until: Only runs last updated before it.
            search: Only runs whose id or flow contains it (a plain, case-sensitive substring).
            labels: Only runs with all these labels. A value matches by its text:
                ``{"qty": "7"}`` finds ``qty=7`` (:mod:`underway.labels`).
        """
        if limit < 1:
            raise ConfigurationError(f"limit must be at least 1, not {limit}")
        after = decode_cursor(cursor) if cursor is not None else None
        wanted = label_filter(labels)
        rows = self._store.list_runs(tenant_id, status=status, flow=flow, since=since,
                                     until=until, after=after, limit=limit + 1,
                                     updated_since=updated_since,
                                     updated_until=updated_until, search=search,
                                     labels=wanted or None)
        rows = [self._readable(r) for r in rows]
        if len(rows) <= limit:
            return RunPage(rows, None)
        last = rows[limit - 1]
        return RunPage(rows[:limit], encode_cursor(last.created_at, last.run_id))

    def activity(self, *, since: float, days: int, hourly: bool = False,
                 tenant_id: str = "default") -> Activity:
        """What the tenant's runs did on each day (or hour) of a window.

        It counts runs created by status, model calls, tokens and cost, approval waits and
        takeovers per approver role, escalations by cause and dead-letterings
        (:mod:`underway.client._activity`).

        Args:
            since: The window's start.
            days: How many days (of 86400 seconds) it spans.
            hourly: Count each hour of the window apart, not each day.
            tenant_id: The tenant.
        """
        return activity(self._store, self._journal, tenant_id, since=since, days=days,
                        hourly=hourly)

    def pending_requests(
        self, *, tenant_id: str = "default", limit: int = 100
    ) -> list[PendingRequest]:
        """Runs that wait for a person — an approval, an answer, a resolution of an
        escalation — with what each asks, soonest expiry first. A run whose journal is
        encrypted and cannot be opened here shows ``[encrypted]`` for what it asks."""
        found = []
        for status in ("waiting", "escalated"):
            rows = self._store.list_runs(tenant_id, status=status, limit=limit)
            try:  # the states of the page together; with a sealed run, each alone
                states = self._journal.load_many(tenant_id, [r.run_id for r in rows])
            except KeyUnavailable:
                states = {}
            for row in rows:
                try:
                    request = request_of(states.get(row.run_id)
                                         or self._journal.load(tenant_id, row.run_id))
                except KeyUnavailable:
                    request = sealed_request(row)
                if request is not None:
                    found.append(request)
        return sorted(found, key=lambda r: (r.expires_at, r.run_id))[:limit]

    def pending_request(self, run_id: str, *,
                        tenant_id: str = "default") -> PendingRequest | None:
        """What the run waits for a person to decide (None: nothing); a resolution of an
        escalated call carries the arguments the call was journaled with."""
        try:
            state = self.state(run_id, tenant_id=tenant_id)
        except KeyUnavailable:
            return sealed_request(self.get_run(run_id, tenant_id=tenant_id))
        request = request_of(state)
        if request is None or request.kind != "resolution" or request.key is None:
            return request
        for rec in self._journal.history(tenant_id, run_id):
            if isinstance(rec.event, ev.ToolStarted) and rec.event.key == request.key:
                return replace(request, args=rec.event.args,
                               sensitive_fields=tuple(rec.event.sensitive_fields or ()),
                               secret_fields=tuple(rec.event.secret_fields or ()))
        return request

    def redactor(self, run_id: str, *, tenant_id: str = "default",
                 reveal: bool = False) -> Redactor:
        """What hides the run's data from a viewer: a :class:`~underway.redaction.Redactor`
        that learned every event of the run (of a run seen lately, the newer ones: a query).

        Args:
            run_id: The run.
            tenant_id: The run's tenant.
            reveal: Show sensitive fields; secrets are hidden always.
        """
        def newer(after: int) -> list[tuple[int, ev.Event]]:
            if after == 0:  # an unknown run raises RunNotFound
                return [(e.seq, e.event) for e in self.events(run_id, tenant_id=tenant_id)]
            stored = self._store.load_events(tenant_id, run_id, after)  # a run it learned of
            return [(s, e) for s, _, e in self._journal.decode_readable(tenant_id, run_id, stored)]
        return self._learned.redactor((tenant_id, run_id), reveal, newer)


_TAIL = 8  # events before a completed run's recorded head searched for its completion
