"""The executor: activating leased runs and advancing them step by step.

One *activation* holds a run's lease and advances it until it waits, finishes or needs a
person. Events are buffered and committed together at the points where durability
matters: before a mutating effect runs (its intent), after a model responds, and at the
end of each step (outcome, ``StepCompleted`` and, when due, a checkpoint), all fenced by
the lease token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, Unpack

from .. import events as ev
from .. import faults
from ..client import Client
from ..clock import Clock, SystemClock
from ..codec import Codec
from ..effects import Tool
from ..errors import (
    ConfigurationError,
    FencedError,
    NonDeterminismError,
    RunCancelledSignal,
    RunNotFound,
    is_store_failure,
)
from ..flow import Done, Flow, RunContext
from ..guard import Guard, GuardOptions
from ..guard.approvals.check import check_approval
from ..identity import worker_identity
from ..journal import Journal
from ..journal.attempts import left_open
from ..journal.projection import expected_update, good_time, question_expiry
from ..journal.state import RunState
from ..redaction import Redactor
from ..store._offload import INLINE, offload_of, run_io
from ..store.base import Lease, RunRecord
from ..store.features import EngineStore
from ..subjects import acting_for
from ..telemetry import NO_METRICS, Metrics
from ._activation import Activation
from ._children import StepWithChildren
from ._eager import Driver, EagerStart, EagerStarts
from ._finish import finish_step, judge_finish, result_taint
from ._group import GroupCommit
from ._inbox import OpenedSignal, pending_signals, read_inbox
from ._loaded import Loaded as _Loaded
from ._loaded import taken_over as _taken_over
from ._notices import escalate, notify
from ._operator import client_method as _client_method
from ._options import EngineKeywords, EngineOptions, settle
from ._registry import Registry
from ._rows import SUSPECTS_PER_ROUND, heal_rows, repair_leased
from ._services import StepServices
from ._stops import DeadLetter, Escalate, Stop, Suspend, Unencodable

_T = TypeVar("_T")


IDLE_CLAIM_BACKOFF = 300.0
"""Seconds before a run claimed with nothing to do, and no wake time of its own, is due
again (a row that disagrees with its journal)."""


class Engine(EagerStarts):
    """Runs flows against a store: activates leased runs and executes their steps. Use one
    engine per process; it is not a singleton.

    Operator actions (:meth:`start`, :meth:`signal`, :meth:`cancel`, :meth:`resolve`...)
    are those of its :attr:`client`; a process that only steers runs needs a client. Its
    :meth:`start` also hands the run to the worker serving the engine, leased in the start's
    transaction, while that worker has a free slot (:mod:`underway.engine._eager`).
    Every store call from async code goes through :meth:`io`, never blocking the loop.

    Args:
        store: Where runs and their journals are.
        flows: The flows it runs.
        tools: Tools its flows call by name, besides those they declare.
        clock: Its time (default: the system's).
        codec: How payloads are encoded (default: the store's; encryption at rest is
            turned on for the store, ``underway.crypto.encrypt``).
        guard: The guard to use (default: a new one). ``guard_options`` are set on it.
        options: The engine's own settings, whole (frozen).
        guard_options: The guard's settings, whole (frozen).
        **keywords: The fields of :class:`EngineOptions` and of
            :class:`~underway.guard.GuardOptions` (``owner``, ``lease_ttl``, ``policy``,
            ``budget``, ``notifier``...), one by one.

    Raises:
        ConfigurationError: A keyword disagrees with the option object given (the error
            names the field), a lease length is out of range, or the secret provider
            serves another environment.
    """

    execution: Callable[[Activation, str], StepWithChildren] = StepWithChildren
    """What executes a step's calls, given the activation and the step's name (a
    counterfactual replay's engine serves recorded results through its own,
    :mod:`underway.ops.replay`)."""

    def __init__(
        self,
        store: EngineStore,
        *,
        flows: Iterable[Flow[Any, Any]] = (),
        tools: Iterable[Tool] = (),
        clock: Clock | None = None,
        codec: Codec | None = None,
        guard: Guard | None = None,
        options: EngineOptions | None = None,
        guard_options: GuardOptions | None = None,
        **keywords: Unpack[EngineKeywords],
    ) -> None:
        options, guarded = settle(options, guard_options, keywords)
        self.guard = guard or Guard()
        self.guard.configure(guarded)
        self.store = store
        self.journal = Journal(store, codec)
        self.guard.codec = codec  # None: the store's, whatever it is when used
        self.clock: Clock = clock or SystemClock()
        self.registry = Registry()
        self.flows: dict[str, Flow[Any, Any]] = self.registry.flows
        """The flows this engine runs, by name."""
        self.tools: dict[str, Tool] = self.registry.tools
        """The tools its flows call, by name."""
        self.options = options if options.owner \
            else dataclasses.replace(options, owner=worker_identity())
        """Its own settings, with ``owner`` filled in; an attribute of the same name, such
        as :attr:`lease_ttl`, set on the engine replaces them."""
        self.unhealed: set[tuple[str, str]] = set()  # suspect rows not healed, logged once
        self._ahead: dict[Lease, _Loaded] = {}  # read by load_ahead, taken by activate
        self.redactor = Redactor()
        """The values hidden fields held in the events this engine journaled (the last
        10,000): what a worker keeps out of its log lines."""
        self.committer: GroupCommit | None = (
            GroupCommit(store)
            if options.group_commit and offload_of(store) is not INLINE else None
        )
        """Where this engine's activations commit together (None: each on its own — the
        store does no I/O, or ``group_commit=False``)."""
        self.services = self._services()
        """What executing a step uses of this engine; rebuilt when a setting changes."""
        self.client = Client._for_executor(store, self.journal, self.clock, self.flows,
                                           signed_resolutions=self.guard.signed_resolutions)
        """The client this engine's operator actions (start, signal, cancel...) go through."""
        self.driver: Driver | None = None
        """The worker serving this engine, if one is: the runs the engine starts go to it
        while it has a free slot (eager start, :mod:`underway.engine._eager`)."""
        for f in flows:
            self.register(f)
        for t in tools:
            self.tools[t.name] = t

    def _services(self) -> StepServices:
        o = self.options
        return StepServices(
            store=self.store, journal=self.journal, clock=self.clock, guard=self.guard,
            registry=self.registry, redactor=self.redactor, committer=self.committer,
            create_run=self.create_run, metrics=o.metrics or NO_METRICS,
            checkpoint_every=o.checkpoint_every, retry_budget=o.retry_budget,
            notify_timeout=o.notify_timeout,
        )

    def _configure(self, **changes: Any) -> None:
        """Replace settings: the activations that start afterwards see them."""
        self.options = dataclasses.replace(self.options, **changes)
        self.services = self._services()

    @property
    def owner(self) -> str:
        """Who this engine's leases are held by."""
        return str(self.options.owner)

    @owner.setter
    def owner(self, value: str) -> None:
        self._configure(owner=value)

    @property
    def lease_ttl(self) -> float:
        """Seconds a lease lasts unless renewed (:attr:`EngineOptions.lease_ttl`)."""
        return self.options.lease_ttl

    @lease_ttl.setter
    def lease_ttl(self, value: float) -> None:
        self._configure(lease_ttl=value)

    @property
    def checkpoint_every(self) -> int:
        """Write a checkpoint at least every this many events."""
        return self.options.checkpoint_every

    @checkpoint_every.setter
    def checkpoint_every(self, value: int) -> None:
        self._configure(checkpoint_every=value)

    @property
    def retry_budget(self) -> int | None:
        """Retries one run may spend across all its tools (None: no limit)."""
        return self.options.retry_budget

    @retry_budget.setter
    def retry_budget(self, value: int | None) -> None:
        self._configure(retry_budget=value)

    @property
    def metrics(self) -> Metrics:
        """Where the engine reports what it does (``underway.telemetry``)."""
        return self.services.metrics

    @metrics.setter
    def metrics(self, value: Metrics | None) -> None:
        self._configure(metrics=value)

    @property
    def notify_timeout(self) -> float:
        """Seconds the notifier may take; past them, or raising, it is logged (the run
        waits in the inbox all the same)."""
        return self.options.notify_timeout

    @notify_timeout.setter
    def notify_timeout(self, value: float) -> None:
        self._configure(notify_timeout=value)

    @property
    def codec(self) -> Codec:
        """How this engine encodes, seals and opens payloads (its journal's)."""
        return self.journal.codec

    async def io(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(*args)``, a call that reaches this engine's store, run on the store's I/O
        threads and awaited (inline on the in-memory store): one worker's activations never
        wait on each other's round trips. A sync ``fn`` of several store calls is one trip."""
        return await run_io(self.store, fn, *args)

    def register(self, flow: Flow[Any, Any]) -> None:
        """Make ``flow`` runnable by this engine (and register the tools it declares)."""
        self.registry.register(flow)

    def tool(self, ref: Tool | str) -> Tool:
        """Resolve a tool by object or registered name."""
        return self.registry.tool(ref)

    # -- operator actions: the client's ------------------------------------------------
    # Each is the client's method, typed as the client's; a Flow passed to start or
    # prepare_start is registered first (an engine runs what it starts).
    prepare_start = _client_method(Client.prepare_start, registers=True)
    signal = _client_method(Client.signal)
    declared_signals = _client_method(Client.declared_signals)
    check_signal = _client_method(Client.check_signal)
    cancel = _client_method(Client.cancel)
    resolve = _client_method(Client.resolve)
    resume = _client_method(Client.resume)
    submit_decision = _client_method(Client.submit_decision)
    state = _client_method(Client.state)

    # -- advancing runs -----------------------------------------------------------------
    def claim(self, *, limit: int = 1, tenant_id: str | None = None, run_id: str | None = None,
              expire: Sequence[tuple[str, str, str]] = ()) -> list[Lease]:
        """Lease due runs for this engine's owner identity.

        Args:
            limit: How many runs at most.
            tenant_id: Only this tenant's runs (None: any tenant's).
            run_id: Only this run (None: any run).
            expire: (tenant, run, owner) of leases whose holders are known dead, ended in
                the claim's transaction (:meth:`~underway.store.leases.LeaseStore.claim`).
        """
        return self.store.claim(owner=self.owner, now=self.clock.now(), ttl=self.lease_ttl,
                                limit=limit, tenant_id=tenant_id, run_id=run_id, expire=expire)

    def heal_rows(self, *, limit: int = SUSPECTS_PER_ROUND, dead: Collection[str] = ()) -> int:
        """Heal the suspect runs rows (:mod:`underway.engine._rows`); how many."""
        return heal_rows(self.services, self.unhealed, limit=limit, dead=dead)

    async def activate(
        self, lease: Lease, *, should_stop: Callable[[], bool] | None = None,
        start: EagerStart | None = None,
    ) -> RunState:
        """Advance a leased run until it waits, finishes or escalates; return its state.

        Args:
            lease: The run's lease.
            should_stop: Asked after each committed step. True hands the run back at that
                step boundary (a stopping worker), its state still ``ready``.
            start: The eager start that took ``lease`` (:meth:`start_leased`). A run it
                created is activated from what it wrote, read from nothing.
        """
        if not self.metrics.enabled:
            return await self._activate(lease, should_stop, start)
        try:
            return await self._activate(lease, should_stop, start)
        except BaseException:
            self.metrics.abandoned(lease.tenant_id, lease.run_id)
            raise
        finally:
            self.metrics.left(lease.tenant_id, lease.run_id)

    def load_ahead(self, lease: Lease) -> None:
        """Read the lease's starting point on this (store) thread, for :meth:`activate`."""
        self._ahead[lease] = self._load(lease)

    async def _activate(
        self, lease: Lease, should_stop: Callable[[], bool] | None, start: EagerStart | None
    ) -> RunState:
        ahead = self._ahead.pop(lease, None)
        loaded = ahead if ahead is not None else await self.io(self._load, lease, start)
        row, state = loaded.row, loaded.state
        if self.metrics.enabled:
            due = row.next_wake_at
            self.metrics.activated(
                state, wake_latency=None if due is None else self.clock.now() - due,
                takeover=bool(loaded.interrupted))
            if loaded.interrupted:
                self.metrics.interrupted(lease.tenant_id, lease.run_id, state.flow,
                                         [(r.seq, r.at, r.event) for r in loaded.interrupted])
        act = Activation(
            self.services, lease, state, loaded.head, state.seq, control_pending=True,
            due_at=row.next_wake_at if good_time(row.next_wake_at) else None,
            row_status=row.status, queue=row.queue, row=row)
        if loaded.refused is not None:
            # A forged checkpoint was ignored; the journal keeps the finding, since the
            # next commit's checkpoint replaces the forged row.
            act.buffer(loaded.refused)
        flow = self._flow(state.flow)
        signals: list[OpenedSignal] | None = loaded.signals
        heartbeat = asyncio.create_task(self._heartbeat(act, asyncio.current_task()))
        # The run's code — steps, tools, hooks — writes beside the journal as this run,
        # about its subject (underway.subjects.acting_run).
        with acting_for(state.tenant_id, state.run_id, state.subject):
            try:
                while True:
                    if act.control_pending:
                        await read_inbox(act, signals)
                    signals = None
                    if not act.state.input_checked and not act.state.final:
                        self._check_input(act, flow)
                    s = act.state
                    expiry = question_expiry(s)
                    if expiry is not None and self.clock.now() >= expiry:
                        act.buffer(ev.EscalationExpired(
                            request_id=str(s.escalation.request_id if s.escalation else None)
                        ))
                        s = act.state
                    if self._deadline_passed(s):
                        escalate(act, ev.Escalated(
                            reason=f"deadline {_iso(s.deadline)} passed", cause="deadline"
                        ))
                    if s.final or s.status in ("escalated", "dead") or (
                        s.status == "waiting"
                        and (s.wake_at is None or self.clock.now() < s.wake_at)
                    ):
                        await self._leave(act, idle=True)
                        return s
                    if s.status == "waiting" and s.pending_approval is not None:
                        act.buffer(ev.ApprovalExpired(
                            request_id=s.pending_approval.request_id
                        ))
                    elif s.status == "waiting":
                        act.buffer(ev.TimerFired(timer_id=s.timer_id or ""))
                    await self._run_step(act, flow)
                    if act.state.status != "ready":
                        # Waiting, escalated or finished: the step's commit hands the run back.
                        await act.commit(release=True)
                        return act.state
                    await act.commit()
                    if should_stop is not None and should_stop():
                        await self._leave(act)
                        return act.state
                    await self._renew_if_due(act)
            except Unencodable as bad:
                return await self._dead_letter_afresh(act, bad.reason, "UnencodableEvent")
            except asyncio.CancelledError:
                if act.lost:
                    raise FencedError(
                        f"run {lease.run_id}: lease lost while a step ran; the step was cancelled"
                    ) from None
                raise
            finally:
                heartbeat.cancel()

    def _load(self, lease: Lease, start: EagerStart | None = None) -> _Loaded:
        """What an activation starts from, read in one trip: the run row, the journal's
        state and head, and the inbox — of a run an eager start created, from the start
        (the inbox read only when signals were sent before the run existed)."""
        if start is not None and start.fresh and start.lease == lease:
            state, head = self.journal.load_created(start.new)
            signals = pending_signals(self.store, lease.tenant_id, lease.run_id, None) \
                if start.result.inbox else []  # a run just created waits for nothing
            return _Loaded(start.result.run, state, head, None, signals, [])
        row = self.store.get_run(lease.tenant_id, lease.run_id)
        if row is None:
            raise RunNotFound(lease.tenant_id, lease.run_id)
        state, head, refused = self.journal.load_head(lease.tenant_id, lease.run_id)
        signals = pending_signals(self.store, lease.tenant_id, lease.run_id, state.waiting_signal)
        # What an interrupted activation committed of its step: telemetry it did not report.
        maybe = self.metrics.enabled and _taken_over(state)
        interrupted = left_open(self.journal.step_attempt(
            lease.tenant_id, lease.run_id, state.seq)) if maybe else []
        return _Loaded(row, state, head, refused, signals, interrupted)

    def _check_input(self, act: Activation, flow: Flow[Any, Any]) -> None:
        """A run started by name, without the flow's code: check its input before any step
        runs, and fail the run, saying why, when it does not match (nothing else ran)."""
        try:
            parsed = flow.parse_input(act.state.input)
            state = flow.initial_state(parsed)
        except ConfigurationError as exc:
            act.buffer(ev.RunFailed(
                reason=f"{exc}; the run was started by flow name, without the flow's code, so "
                       "its input is checked by the worker, and no step ran",
                error_type="InvalidInput",
            ))
            return
        act.buffer(ev.InputChecked(
            input=parsed.model_dump(mode="json"), state=state.model_dump(mode="json"),
            first_step=str(flow.start_step),
            signals=None if flow.signals is None else sorted(flow.signals),
        ))

    async def _dead_letter_afresh(
        self, act: Activation, reason: str, error_type: str
    ) -> RunState:
        """Drop what the activation did not commit, and journal the run dead from what the
        journal holds (signals it had read stay in the inbox for later)."""
        return await self.dead_letter(act.lease, reason=reason, error_type=error_type,
                                      due_at=act.due_at)

    async def dead_letter(
        self, lease: Lease, *, reason: str, error_type: str, due_at: float | None = None
    ) -> RunState:
        """Journal a leased run dead (``RunDeadLettered``) from its journal and hand it back,
        when its activation keeps failing in a way nothing journaled (for an operator).

        Args:
            lease: The run's lease.
            reason: Why; values hidden fields held are removed (:mod:`underway.redaction`).
            error_type: The kind of failure.
            due_at: The run row's ``next_wake_at`` when claimed.
        """
        state, head, row = await self.io(self._load_journal, lease)
        if state.final or state.status == "dead":
            await self.io(self.store.release, lease)
            return state
        fresh = Activation(self.services, lease, state, head, state.seq, due_at=due_at,
                           row_status=row.status if row is not None else state.status)
        fresh.buffer(ev.RunDeadLettered(reason=self.redactor.text(reason),
                                        error_type=error_type, step=state.step))
        await fresh.commit(release=True)
        return fresh.state

    def _load_journal(self, lease: Lease) -> tuple[RunState, str, RunRecord | None]:
        """The journal's state and head, and the run row (None: gone), in one trip."""
        state, head, _ = self.journal.load_head(lease.tenant_id, lease.run_id)
        return state, head, self.store.get_run(lease.tenant_id, lease.run_id)

    async def verify_approval(self, s: RunState, key: str, tool: str, h: str) -> str | None:
        """Check, right before an approved call runs, that its journaled approval still
        holds for exactly this call (:func:`~underway.guard.approvals.check.check_approval`).

        Args:
            s: The run's state, which holds the journaled approval.
            key: The call's idempotency key.
            tool: The tool about to run.
            h: The hash of the arguments it is about to run with.

        Returns:
            None when the approval holds; otherwise the reason it does not.
        """
        return await check_approval(self.store, s, key, tool, h, now=self.clock.now())

    async def notify(self, s: RunState, e: ev.ApprovalRequested | ev.Escalated) -> None:
        """Tell people a run waits for them — an approval request, a question or an
        escalation to resolve — once the request is durable, with every field a run hides
        redacted; a notifier's failures are its own."""
        await notify(self.services, s, e)

    def _deadline_passed(self, s: RunState) -> bool:
        return (
            s.deadline is not None and not s.deadline_escalated and not s.final
            and s.status not in ("escalated", "dead") and self.clock.now() >= s.deadline
        )

    async def _renew_if_due(self, act: Activation) -> None:
        """Renew between steps once half the lease is gone (a busy loop of quick steps may
        never yield to the heartbeat task)."""
        now = self.clock.now()
        if act.lease.expires_at - now > self.lease_ttl / 2:
            return
        renewed = await self.io(
            functools.partial(self.store.renew, act.lease, now=now, ttl=self.lease_ttl)
        )
        if renewed is None:
            raise FencedError(f"run {act.lease.run_id}: lease lost to another worker")
        act.lease = renewed

    async def _leave(self, act: Activation, *, idle: bool = False) -> None:
        """Hand the run back: with the last commit when there is one, else on its own.

        ``idle``: the journal says the run is not due (waiting, escalated, dead or finished).
        A row that contradicts the journal is rewritten from it; one only due too early is
        not due before the journal's wake time (or a back-off): never claimed in a loop."""
        if act.pending:
            await act.commit(release=True)
            return
        retry_at = None
        if idle and await self.io(functools.partial(repair_leased, act)):
            return
        if idle:
            now = self.clock.now()
            wake = expected_update(act.state, now, act.due_at).next_wake_at
            retry_at = wake if wake is not None and wake > now else now + IDLE_CLAIM_BACKOFF
        await self.io(functools.partial(self.store.release, act.lease, retry_at=retry_at))

    async def _run_step(self, act: Activation, flow: Flow[Any, Any]) -> None:
        s = act.state
        # A run parked at a renamed or removed step continues at the step its alias names.
        step = flow.resolve_step(str(s.step))
        act.buffer(ev.StepStarted(step=step, attempt=s.attempt + 1, worker=self.owner))
        act.in_flight.clear()  # calls are the step's own: a step's calls settle within it
        x = self.execution(act, step)
        try:
            ctx: RunContext[Any, Any] = RunContext(
                x, flow.parse_state(s.state), flow.input_type.model_validate(s.input),
                taint_of=flow.taint_of,
            )
            faults.point("step.before_run")
            nxt = await flow.get_step(step)(ctx)
            if isinstance(nxt, Done):
                nxt = await judge_finish(x, flow, nxt, result_taint(s, flow, ctx))
            if x.broken is not None:
                raise x.broken
            if act.store_error is not None:
                # Step code swallowed a database failure: its view of the run is unsure.
                raise act.store_error
            finish_step(act, flow, step, ctx, nxt)
        except Suspend:
            pass
        except DeadLetter as dead:
            act.buffer(ev.RunDeadLettered(
                reason=dead.reason, error_type=dead.error_type, step=step
            ))
        except Escalate as esc:
            escalate(act, esc.event)
        except Stop as stop:
            act.buffer(stop.event)
        except NonDeterminismError as exc:
            escalate(act, ev.Escalated(reason=str(exc), index=exc.index))
        except RunCancelledSignal:
            act.buffer(ev.RunCancelled(by="step", reason="cancelled from inside the step"))
        except Exception as exc:
            if act.store_error is not None:
                raise act.store_error from None
            if is_store_failure(exc):
                raise
            # Not a business outcome (that is ctx.fail): the run stops for an operator, who
            # may fix the cause and resume it, or cancel it.
            # An exception's text may quote a value a tool hides: never journaled with it.
            act.buffer(ev.RunDeadLettered(
                reason=self.redactor.text(f"{type(exc).__name__}: {exc}"),
                error_type=type(exc).__name__, step=step))

    async def _heartbeat(self, act: Activation, step_task: asyncio.Task[Any] | None) -> None:
        """Renew the lease while a step awaits slow tools. Once the lease is lost, cancel
        the step: another worker owns the run, and a call still in flight here should stop
        before it reaches the outside world (its commit would be fenced anyway)."""
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            renewed = await self.io(functools.partial(
                self.store.renew, act.lease, now=self.clock.now(), ttl=self.lease_ttl
            ))
            if renewed is None:
                act.lost = True
                if step_task is not None:
                    step_task.cancel()
                return
            act.lease = renewed

    def _flow(self, name: str) -> Flow[Any, Any]:
        return self.registry.flow(name)


def _iso(t: float | None) -> str:
    return "never" if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")
