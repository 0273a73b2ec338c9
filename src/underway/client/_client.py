"""The client: everything done to runs from outside a worker, with no flow code needed, over
a database or over ``underway serve``'s HTTP API."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from types import TracebackType
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError
from typing_extensions import Unpack

from .. import inputs
from ..clock import Clock, SystemClock
from ..codec import Codec
from ..control import RESERVED_PREFIX, resolution_of, resumption_of
from ..errors import AmbiguousRunId, ConfigurationError, RunNotFound
from ..events import JSON
from ..flow import Flow
from ..guard.approvals import ApprovalCheck, SignedDecision, verify_decision
from ..guard.approvals.decision import REASON_TEXT
from ..journal import Journal
from ..store import connect
from ..store.base import CoreStore, NewRun, RunRecord, SignalRecord, Store, whole
from ._bulk import Bulk
from ._consent import Consents
from ._database import DatabaseTransport
from ._deciding import Deciding
from ._forking import Forks
from ._http import HttpTransport
from ._labels import Labels
from ._options import StartKeywords, StartOptions
from ._reads import Reads
from ._settling import Settling
from ._starting import check_start
from ._streams import Streams
from ._transport import Transport, is_http


class Client(Bulk, Consents, Deciding, Forks, Labels, Reads, Settling, Streams):
    """Starts, steers and reads runs: what an operator, the CLI, an HTTP API or another service
    does. It needs no flow code and runs no step; workers (an :class:`~underway.Engine` driven by
    a :class:`~underway.Worker` or :class:`~underway.Runner`) do that. Every method takes
    ``tenant_id`` (default ``"default"``).

    It reaches runs in a database (a store, or a database URL) or through ``underway serve``
    (an ``http://`` or ``https://`` URL and an API key), with the same methods and the same
    results. Over HTTP the key's tenant is the tenant: leave ``tenant_id`` out or give the
    key's. The server journals the key as who acted (``by`` and ``sender`` are its).

    >>> client = Client("https://runs.example.com", api_key="uw_...")  # doctest: +SKIP
    >>> client.start("invoice_followup", {"invoice": "INV-7"})  # doctest: +SKIP

    Args:
        target: A store you opened (and close); or a URL, which the client opens and
            :meth:`close` closes: ``sqlite:///path.db``, ``postgresql://...``,
            ``memory://``, ``http://host:port`` or ``https://host``.
        api_key: The API key, with an HTTP URL (``underway apikeys new``).
        flows: Flows whose code this process has. Runs of those are checked when started
            (input, steps, declared signals). Others are started by name with their raw
            input, checked by the first worker that runs them.
        clock: What stamps starts, signals and decisions (default: the system's clock).
        codec: How payloads are encoded (default: the store's; sealed when encryption is
            on). A database's only.
        signed_resolutions: Settle escalations and dead runs only with signed resolutions, as the
            deployment's workers do (``[approvals] signed_resolutions``). :meth:`resolve` and
            :meth:`resume` then refuse at once (:class:`~underway.errors.SignedResolutionRequired`).
        migrate: With a database URL: migrate its schema first.
        timeout: With an HTTP URL: the most seconds one request may take.
        reveal: With an HTTP URL: ask to see the fields tools declare sensitive (the key's
            role must be allowed to).

    Raises:
        ConfigurationError: A URL no transport takes, an HTTP URL without an API key, or an
            option the transport has no use for.
    """

    def __init__(
        self,
        target: Store | str,
        *,
        api_key: str | None = None,
        flows: Iterable[Flow[Any, Any]] = (),
        clock: Clock | None = None,
        codec: Codec | None = None,
        signed_resolutions: bool = False,
        migrate: bool = True,
        timeout: float = 30.0,
        reveal: bool = False,
    ) -> None:
        self.flows: dict[str, Flow[Any, Any]] = {f.name: f for f in flows}
        """Flows whose code this client has, by name."""
        self._signed = signed_resolutions
        self._owns = isinstance(target, str)
        if isinstance(target, str) and is_http(target):
            if codec is not None:
                raise ConfigurationError(
                    "codec= is a database client's: over HTTP the server seals and opens "
                    "payloads")
            if api_key is None:
                raise ConfigurationError(f"a client over HTTP ({target}) needs api_key=: "
                                         "make one with `underway apikeys new`")
            self._transport: Transport = HttpTransport(
                target, api_key=api_key, clock=clock or SystemClock(), flows=self.flows,
                timeout=timeout, reveal=reveal)
            return
        if api_key is not None or reveal:
            raise ConfigurationError(
                f"{'api_key=' if api_key is not None else 'reveal='} goes with an http:// "
                "or https:// URL; a database client needs none (it reads what the store "
                "holds; Client.redactor hides what a viewer may not see)")
        store = connect(target, migrate=migrate) if isinstance(target, str) else target
        self._transport = DatabaseTransport(store, Journal(store, codec),
                                            clock or SystemClock(), self.flows,
                                            strict=bool(self.flows))

    @classmethod
    def connect(
        cls, url: str, *, migrate: bool = True, flows: Iterable[Flow[Any, Any]] = (),
        clock: Clock | None = None, codec: Codec | None = None,
        signed_resolutions: bool = False, api_key: str | None = None,
    ) -> Client:
        """A client on the store or server at ``url``; :meth:`close` closes it.

        Args:
            url: ``sqlite:///path.db``, ``postgresql://...``, ``memory://``, or
                ``http(s)://host:port`` with ``api_key``.
            migrate: Migrate the store's schema first.
            flows: As for :class:`Client`.
            clock: As for :class:`Client`.
            codec: As for :class:`Client`.
            signed_resolutions: As for :class:`Client`.
            api_key: As for :class:`Client`.
        """
        return cls(url, api_key=api_key, migrate=migrate, flows=flows, clock=clock,
                   codec=codec, signed_resolutions=signed_resolutions)

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
        client.flows, client._owns = flows, False
        client._signed = signed_resolutions
        client._transport = DatabaseTransport(whole(store, by="an engine's client"), journal,
                                              clock, flows, strict=True, owner="engine")
        return client

    @property
    def signed_resolutions(self) -> bool:
        """Whether unsigned resolutions and resumes are refused up front: this client was
        told so, or (over HTTP) the server refuses them itself."""
        return self._signed or self._transport.settles_signed_only()

    @signed_resolutions.setter
    def signed_resolutions(self, value: bool) -> None:
        self._signed = value

    @property
    def clock(self) -> Clock:
        """The clock that stamps starts, signals and decisions."""
        return self._transport.clock

    @property
    def store(self) -> Store:
        """The store this client reads and writes (a database client's only)."""
        return self._database("store", "it has no store: the server's workers own it").store

    @property
    def codec(self) -> Codec:
        """How this client encodes, seals and opens payloads (by default its store's; a
        database client's only)."""
        return self._database("codec", "the server seals and opens payloads").codec

    def _database(self, method: str, why: str) -> DatabaseTransport:
        """The database transport, or an error naming ``method`` and ``why`` not."""
        if isinstance(self._transport, DatabaseTransport):
            return self._transport
        raise ConfigurationError(
            f"Client.{method} works on a database only, not over HTTP "
            f"({self._transport.where}): {why}")

    def close(self) -> None:
        """Close the store or the HTTP connections, when the client opened them."""
        if self._owns:
            self._transport.close()

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
                Over HTTP, ``run_id``, ``principal``, ``roles`` and ``lineage`` are refused:
                the API sets them.

        Raises:
            ConfigurationError: Wrong input (nothing is stored), or keywords beside ``options``.
        """
        name = flow.name if isinstance(flow, Flow) else flow
        opts = check_start(name, input, options, keywords)
        opts = replace(opts, tenant_id=self._transport.tenant(opts.tenant_id))
        return self._transport.start(flow, input, opts)

    def prepare_start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        options: StartOptions | None = None,
        **keywords: Unpack[StartKeywords],
    ) -> NewRun:
        """The run :meth:`start` would create (input checked when the flow is known, first
        event encoded), for a caller that creates it inside a transaction of its own (a
        database client's only).

        Args:
            flow: As for :meth:`start`.
            input: As for :meth:`start`.
            options: As for :meth:`start`.

        Raises:
            InvalidInput: Input no run can hold, naming the argument: a NUL or lone surrogate in a
                string, NaN or an infinity, nesting deeper than :data:`~underway.inputs.MAX_DEPTH`.
        """
        db = self._database("prepare_start", "a run is created in the caller's own database "
                            "transaction, and the server's database is out of reach")
        name = flow.name if isinstance(flow, Flow) else flow
        return db.prepare_start(flow, input, check_start(name, input, options, keywords))

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
        _check_signal_input(run_id, name, signal_id, payload)
        tenant_id = self._transport.tenant(tenant_id)
        if not self._transport.remote:  # a server checks it with this very method
            self.check_signal(run_id, name, tenant_id=tenant_id)
        return self._transport.signal(tenant_id, run_id, name, payload, signal_id, sender)

    def prepared_signal(
        self, run: str | RunRecord, name: str, payload: JSON = None, *,
        tenant_id: str = "default", signal_id: str | None = None, sender: str | None = None,
    ) -> SignalRecord:
        """The inbox row :meth:`signal` would write, checked as it checks it, not written
        (a database client's only): a server writes the signals of concurrent requests in
        one transaction (:meth:`~underway.store.sqlite.SQLiteStore.send_signals`).

        Args:
            run: The run's id, or its row as :meth:`get_run` read it just now.
            name: The signal's name.
            payload: What the signal carries.
            tenant_id: The run's tenant.
            signal_id: The signal's id (default: a new one).
            sender: Who sends it.
        """
        db = self._database("prepared_signal", "the server writes the signals it is sent")
        if name.startswith(RESERVED_PREFIX):
            raise ConfigurationError(
                f"signal names starting with 'underway.' are reserved ({name!r}); use "
                "cancel() or resolve() for those"
            )
        run_id = run if isinstance(run, str) else run.run_id
        _check_signal_input(run_id, name, signal_id, payload)
        tenant_id = db.tenant(tenant_id)
        row = run if isinstance(run, RunRecord) else self.get_run(run_id, tenant_id=tenant_id)
        self._check_signal(row, name)
        return db.signal_record(tenant_id, run_id, name, payload, signal_id, sender, row=row)

    def _send(
        self, run_id: str, name: str, payload: JSON, tenant_id: str, signal_id: str | None,
        sender: str | None,
    ) -> bool:
        """Any signal to the run's inbox, reserved names included, unchecked (a database
        client's only: tests forge with it what an attacker with the database could)."""
        db = self._database("_send", "the API checks every signal")
        _check_signal_input(run_id, name, signal_id, payload)
        return db.signal(tenant_id, run_id, name, payload, signal_id, sender)

    def declared_signals(self, run_id: str, *, tenant_id: str = "default") -> frozenset[str] | None:
        """The signal names the run's flow declares (None: it declares none, or the run was
        started by name and no worker has checked it yet). The flow's code answers when
        this client has it; otherwise the declaration journaled with the run."""
        return self._declared(self.get_run(run_id, tenant_id=tenant_id))

    def _declared(self, row: RunRecord) -> frozenset[str] | None:
        flow = self.flows.get(row.flow)
        if flow is not None:
            return flow.signals
        journaled = self._transport.state(row.tenant_id, row.run_id).signals
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
        self._check_signal(self.get_run(run_id, tenant_id=tenant_id), name)

    def _check_signal(self, row: RunRecord, name: str) -> None:
        """:meth:`check_signal` of the run ``row``."""
        run_id = row.run_id
        if name == row.waiting_signal:
            return
        declared = self._declared(row)
        if declared is not None and name not in declared:
            raise ConfigurationError(
                f"run {run_id} of flow {row.flow!r} takes only the signals its flow declares "
                f"({', '.join(sorted(declared)) or 'none'}); {name!r} is not one of them, so "
                "no step would read it. Send a declared name, or add it to Flow(signals=...)"
            )

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
        tenant_id = self._transport.tenant(tenant_id)
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
        approver = self._transport.approver(tenant_id, d.approver_id)
        reason = verify_decision(d, check=check, approver=approver, now=self.clock.now())
        if reason is not None:
            raise ConfigurationError(
                f"decision {d.nonce!r} by {d.approver_id!r} on request {d.request_id!r} of run "
                f"{d.run_id} would be refused: {REASON_TEXT[reason]} ({reason})"
            )
        return self._transport.deliver(tenant_id, d.model_dump(mode="json"))

    # -- reading runs -------------------------------------------------------------------
    def get_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord:
        """The run's row (status, step, flow, times); :class:`RunNotFound` when there is
        no such run in the tenant."""
        tenant_id = self._transport.tenant(tenant_id)
        row = self._transport.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        return row

    def find_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord:
        """The run whose id is ``run_id``, or else the one run whose id starts with it:
        :class:`RunNotFound` when none does, :class:`~underway.errors.AmbiguousRunId`
        (naming them) when several do."""
        tenant_id = self._transport.tenant(tenant_id)
        row = self._transport.get_run(tenant_id, run_id) if run_id else None
        if row is not None:
            return row
        if not run_id:
            _missing(tenant_id, run_id)
        found = self._transport.list_runs(tenant_id, limit=6, cursor=None,
                                          id_prefix=run_id).runs
        if not found:
            _missing(tenant_id, run_id)
        if len(found) > 1:
            raise AmbiguousRunId(tenant_id, run_id, sorted(r.run_id for r in found))
        return found[0]


def _missing(tenant_id: str, run_id: str) -> NoReturn:
    raise RunNotFound(tenant_id, run_id)


def _check_signal_input(run_id: str, name: str, signal_id: str | None,
                        payload: JSON) -> None:
    """Refuse what no inbox can hold, naming the argument (:mod:`underway.inputs`)."""
    inputs.text("run_id", run_id, max_length=inputs.MAX_NAME)
    inputs.text("name", name, max_length=inputs.MAX_NAME)
    if signal_id is not None:
        inputs.text("signal_id", signal_id, max_length=inputs.MAX_NAME)
    inputs.json_value("payload", payload)
