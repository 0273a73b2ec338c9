"""Counterfactual replay: a historical run executed again against new code, a new model or
a new policy, without side effects, and its decisions compared with the original's."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ... import events as ev
from ...client import Client
from ...clock import ManualClock
from ...effects import Model, Tool
from ...errors import ConfigurationError, RunNotFound
from ...events import RunStarted, genesis_hash
from ...flow import Flow
from ...guard import GuardOptions
from ...guard.approvals import public_key_of, register_approver, sign_decision
from ...guard.policy import Policy
from ...journal.projection import stored_labels
from ...journal.state import APPROVAL_SIGNAL, Recorded, RunState
from ...runner import Runner
from ...secrets import BoundSecrets
from ...store._offload import run_io
from ...store.base import ConsentRecord, NewRun, Store
from ...store.memory import MemoryStore
from ._diff import Change, changes
from ._engine import Diverged, Divergence, OnDivergence, ReplayEngine, ReplaySession
from ._tape import Tape
from ._trace import APPROVER, Trace

MAX_ROUNDS = 10_000
"""The most times a replay unblocks its run (a decision, a signal, a timer) before it
gives up: a replay that loops for ever stops here."""


@dataclass(slots=True)
class ReplayResult:
    """A run and its replay: both :class:`Trace` s, where the replay stopped (``stopped``:
    a divergence with ``--on-divergence stop``, or the end of an unfinished original;
    None when it ran to its end), the divergences answered with stubs, the
    :class:`Change` s in its decisions, and both runs' events (to learn what a viewer may
    not see before showing any)."""

    tenant_id: str
    run_id: str
    flow: str
    original: Trace
    replay: Trace
    stopped: Divergence | None
    divergences: list[Divergence]
    changes: list[Change]
    assumed: list[str] = field(default_factory=list)
    """Decisions the replay had to assume: approvals the original never asked for
    (granted, so the replay goes on)."""
    original_events: list[Recorded] = field(default_factory=list, repr=False)
    replay_events: list[Recorded] = field(default_factory=list, repr=False)

    @property
    def changed(self) -> bool:
        """True when the replay decided anything differently."""
        return bool(self.changes)


async def replay_run(
    store: Store, run_id: str, *, flows: Iterable[Flow[Any, Any]], tools: Iterable[Tool] = (),
    policy: Policy | None = None, model: Model | None = None,
    on_divergence: OnDivergence = "stop", environment: str | None = None,
    tenant_id: str = "default", guard: GuardOptions | None = None,
) -> ReplayResult:
    """Execute a run of ``store`` again with the new code.

    The replay runs on its own in-memory store. Nothing is written to ``store``: it is only
    read. No tool runs. Each call passes the whole guard of the replay's engine. It is
    answered with the original's journaled result of the same call: same tool and
    arguments, in call order. Child runs are answered from their own journals. A call the
    original did not make is a divergence, answered as ``on_divergence`` says.

    The original's signals, answers and timers are delivered when the replay waits for them.
    Its approval decisions are given again, signed by a replay approver in the replay's
    store. An approval the original never needed is assumed granted, and said so.

    Args:
        store: The store.
        run_id: The run.
        flows: The new code's flows.
        tools: The new code's tools.
        policy: In place of every flow's and the engine's; None keeps the code's own.
        model: In place of every model the steps ask. None serves the original's recorded
            responses, in order.
        on_divergence: ``stop`` at a call the original did not make, or ``stub`` it.
        environment: The environment to decide in. None: the one the original's journal
            records, else ``guard``'s.
        tenant_id: The run's tenant.
        guard: The worker's guard settings (:meth:`~underway.config.Config.make_guard_options`):
            its policy for flows without their own, budgets, environment and secrets
            bindings. None: the defaults. Its notifier is never used.
    """
    found = await run_io(store, _original, store, run_id, tenant_id)
    original = found.traces[run_id]
    started = original.started
    if started is None:
        raise ConfigurationError(f"run {run_id} has no RunStarted event to replay from")
    code = {f.name: f for f in flows}
    if started.flow not in code:
        raise ConfigurationError(f"the new code has no flow {started.flow!r} (run {run_id}'s "
                                 f"flow); it has {sorted(code)}")

    def load(rid: str) -> Tape | None:
        trace = found.traces.get(rid)
        return None if trace is None else Tape(trace)

    session = ReplaySession(load, on_divergence=on_divergence, model=model)
    at = found.records[0].at
    clock = ManualClock(at)
    mem = MemoryStore()
    mem.migrate()
    settings = _decided_in(dataclasses.replace(guard or GuardOptions(), notifier=None),
                           environment or _recorded_environment(found.records))
    engine = ReplayEngine(
        mem, flows=[_with_policy(f, policy) for f in code.values()], tools=tools,
        clock=clock, guard_options=settings, session=session, retry_budget=None,
    )
    await engine.io(_start, engine, started, run_id, tenant_id, at, found.consents)
    driver = _Driver(engine, clock, session, tenant_id, run_id)
    stopped = await driver.run()
    replay_records, replay_state = await engine.io(_ended, engine, run_id, tenant_id)
    replay = _trace(replay_records, replay_state, session.args)
    if stopped is not None:
        for c in replay.calls:
            if c.outcome in ("unknown", "pending"):
                c.outcome = "stopped"
    return ReplayResult(
        tenant_id, run_id, started.flow, original, replay, stopped, session.divergences,
        changes(original, replay, stopped), driver.assumed, found.records, replay_records,
    )


@dataclass(frozen=True, slots=True)
class _Original:
    """What a replay reads of the original, in one trip: the run's events, the traces of
    the run and of every run it started (their journals answer the replay's child runs),
    and its data subject's consent records."""

    records: list[Recorded]
    traces: dict[str, Trace]
    consents: list[ConsentRecord]


def _recorded_environment(records: list[Recorded]) -> str | None:
    """The environment the original's guard decided in, as its journal says (None: it
    decided nothing, or before the environment was recorded)."""
    for r in records:
        if isinstance(r.event, ev.PolicyDecided) and r.event.environment is not None:
            return r.event.environment
    return None


def _decided_in(settings: GuardOptions, environment: str | None) -> GuardOptions:
    """``settings`` for a guard in ``environment``, its secrets bound there too."""
    if environment is None or environment == settings.environment:
        return settings
    secrets = settings.secrets
    if isinstance(secrets, BoundSecrets):
        secrets = secrets.rebound(environment)
    return dataclasses.replace(settings, environment=environment, secrets=secrets)


def _original(store: Store, run_id: str, tenant_id: str) -> _Original:
    source = Client(store)
    records = source.history(run_id, tenant_id=tenant_id)
    state = source.state(run_id, tenant_id=tenant_id)
    if state.purged:
        raise ConfigurationError(f"run {run_id}: retention purged its payloads; there is "
                                 "nothing to replay")
    traces = {run_id: _trace(records, state)}
    todo = list(state.children)
    while todo:
        child = todo.pop()
        try:
            child_state = source.state(child, tenant_id=tenant_id)
            traces[child] = _trace(source.history(child, tenant_id=tenant_id), child_state)
        except RunNotFound:
            continue  # journaled as started, never created: the replay's child diverges
        todo += [c for c in child_state.children if c not in traces]
    subject = state.subject
    consents = store.consent_history(tenant_id, subject) if subject is not None else []
    return _Original(records, traces, consents)


def _ended(engine: ReplayEngine, run_id: str, tenant_id: str) -> tuple[list[Recorded],
                                                                       RunState]:
    return (engine.client.history(run_id, tenant_id=tenant_id),
            engine.state(run_id, tenant_id=tenant_id))


def _trace(records: list[Recorded], state: RunState,
           args: dict[str, Any] | None = None) -> Trace:
    t = Trace.of(records, args)
    t.run_id, t.status = state.run_id, state.status
    return t


def _with_policy(flow: Flow[Any, Any], policy: Policy | None) -> Flow[Any, Any]:
    """``flow`` under ``policy`` (a shallow copy: the steps are the flow's own)."""
    if policy is None:
        return flow
    twin = copy.copy(flow)
    twin.policy = policy
    return twin


def _start(engine: ReplayEngine, started: RunStarted, run_id: str, tenant_id: str,
           at: float, consents: list[ConsentRecord]) -> None:
    """Create the run in the replay's store as the original was created — started afresh
    by the new code, or, a fork, which starts from a state it was given, with the
    original's own first event — and give the store its subject's consent records."""
    for consent in consents:
        engine.store.record_consent(consent)
    if started.fork is None:
        engine.client.start(
            started.flow, started.input, tenant_id=tenant_id, run_id=run_id,
            idempotency_key=started.idempotency_key, deadline=started.deadline,
            principal=started.principal, roles=started.roles, subject=started.subject,
            purpose=started.purpose, consent=started.consent,
            # The replay inherits the original's lineage whole: its outside origin and
            # taint, shadow mode, trace and labels.
            trace_context=started.trace_context, lineage=started.lineage,
        )
        return
    blobs: dict[str, bytes] = {}
    first = engine.journal.encode(tenant_id, run_id, [(1, at, started)],
                                  genesis_hash(tenant_id, run_id), blobs)[0]
    engine.store.create_run(NewRun(
        tenant_id=tenant_id, run_id=run_id, flow=started.flow, idempotency_key=None,
        first_event=first, blobs=blobs, step=started.first_step, now=at, next_wake_at=at,
        subject=started.subject, purpose=started.purpose,
        labels=stored_labels(started.lineage),
    ))


class _Driver:
    """Runs the replay and gives it what the original got: decisions, answers, signals
    and time."""

    def __init__(self, engine: ReplayEngine, clock: ManualClock, session: ReplaySession,
                 tenant_id: str, run_id: str) -> None:
        self.engine, self.clock, self.session = engine, clock, session
        self.tenant_id, self.run_id = tenant_id, run_id
        self.assumed: list[str] = []
        self._roles: dict[str, set[str]] = {}
        self._cancelled: set[str] = set()
        self._key: Any = None

    async def run(self) -> Divergence | None:
        runner = Runner(self.engine)
        for _ in range(MAX_ROUNDS):
            try:
                await runner.run_until_idle()
            except Diverged as d:
                return d.divergence
            try:
                if not await self.engine.io(self._unblock):
                    return None
            except Diverged as d:
                return d.divergence
        return Divergence(self.run_id, "", "wait", f"the replay did not end within "
                                                   f"{MAX_ROUNDS} rounds")

    def _state(self, run_id: str) -> RunState:
        return self.engine.state(run_id, tenant_id=self.tenant_id)

    def _unblock(self) -> bool:
        """Give one waiting run of the replay what it waits for; False when the replay
        has ended, or nothing can be given (it ends there)."""
        if self._state(self.run_id).final:
            return False
        rows = [r for status in ("waiting", "escalated", "ready")
                for r in self.engine.store.list_runs(self.tenant_id, status=status,
                                                     limit=1000)]
        rows.sort(key=lambda r: r.run_id != self.run_id)  # the replayed run first
        wakes = []
        for row in rows:
            s = self._state(row.run_id)
            if self._cancel(s):
                return True
            if s.status == "waiting" and s.waiting_signal == APPROVAL_SIGNAL:
                self._decide(s)
                return True
            if s.status == "escalated":
                self._answer(s)
                return True
            if s.status == "waiting" and s.waiting_signal and s.waiting_signal != \
                    "underway.child":
                tape = self.session.tape(s.run_id)
                # The journal's order is the truth: the original's matching wait either
                # got its signal (given now, before any timer) or timed out (its timer is
                # given below; a signal that came later belongs to a later wait).
                waited = tape.wait(s.steps_completed, s.waiting_signal) \
                    if tape is not None else None
                got = waited.received if waited is not None else None
                if got is not None:
                    self.engine.client.signal(s.run_id, s.waiting_signal, got.payload,
                                              tenant_id=self.tenant_id,
                                              signal_id=got.signal_id, sender=got.sender)
                    return True
                timed_out = waited is not None and waited.timed_out
                if s.wake_at is None or (not timed_out and (
                        tape is None or not tape.trace.finished)):
                    # No such signal recorded: an unfinished original may still get it;
                    # a finished one waited in vain until its timeout (given below).
                    raise Diverged(self._missing(s, f"signal {s.waiting_signal!r}"))
            if row.next_wake_at is not None:
                wakes.append(row.next_wake_at)
        if not wakes:
            return False
        self.clock.advance(max(min(wakes) - self.clock.now(), 0.0) + 0.001)
        return True

    def _cancel(self, s: RunState) -> bool:
        """Cancel ``s`` where the original was cancelled: once the replay has completed as
        many steps, before it is given anything more. True when the cancel is sent."""
        tape = self.session.tape(s.run_id)
        cancel = tape.trace.cancelled if tape is not None else None
        if cancel is None or s.steps_completed < cancel[0] or s.run_id in self._cancelled:
            return False
        self._cancelled.add(s.run_id)
        self.engine.client.cancel(s.run_id, by=cancel[1].by, reason=cancel[1].reason,
                                  tenant_id=self.tenant_id)
        return True

    def _missing(self, s: RunState, what: str) -> Divergence:
        tape = self.session.tape(s.run_id)
        if tape is not None and not tape.trace.finished:
            return Divergence(s.run_id, s.step or "", "end", (
                f"the original run has gone no further (it is {tape.trace.status}); the "
                f"replay waits for {what}"))
        return Divergence(s.run_id, s.step or "", "wait",
                          f"the replay waits for {what}, which the original never got")

    def _signer(self, approver: str, role: str | None) -> Any:
        """The replay's signing key, registered in the replay's own store for
        ``approver`` with ``role`` (the original's approver is named again, since a run
        may read who decided; the key is the replay's)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if self._key is None:
            self._key = Ed25519PrivateKey.generate()
        roles = self._roles.setdefault(approver, set())
        wanted = role or APPROVER
        if wanted not in roles:
            roles.add(wanted)
            register_approver(self.engine.store, approver,
                              public_key=public_key_of(self._key), roles=sorted(roles),
                              now=self.clock.now(), tenant_id=self.tenant_id)
        return self._key

    def _decide(self, s: RunState) -> None:
        """Decide the approval the run waits for as the original's was decided; one it
        never asked for is assumed granted."""
        p = s.pending_approval
        assert p is not None
        tape = self.session.tape(s.run_id)
        # The request id ends with the call's key: the original's call of that key was
        # decided, not an earlier one with equal arguments.
        key = p.request_id.split(":", 1)[-1]
        found = tape.match(p.tool, p.args_hash, key) if tape is not None else None
        verdict = found[1].approval if found is not None else None
        approver = (found[1].approver if found is not None else None) or APPROVER
        if verdict == "expired":
            self.clock.advance(max(p.expires_at - self.clock.now(), 0.0) + 0.001)
            return
        if verdict is None or verdict == "requested":
            what = ("never asked for one for these arguments" if verdict is None
                    else "was never decided")
            if verdict == "requested" and tape is not None and not tape.trace.finished:
                raise Diverged(self._missing(s, f"a decision on {p.tool}"))
            self.assumed.append(f"{p.tool}: approval assumed granted (the original {what})")
        signed = sign_decision(
            self._signer(approver, p.required_role), request_id=p.request_id,
            run_id=s.run_id, tenant_id=self.tenant_id, tool=p.tool, args_hash=p.args_hash,
            decision="reject" if verdict == "rejected" else "approve",
            expires_at=p.expires_at, approver_id=approver,
            comment=found[1].comment if found is not None else "assumed by the replay",
        )
        self.engine.client.submit_decision(signed.model_dump(mode="json"),
                                           tenant_id=self.tenant_id)

    def _answer(self, s: RunState) -> None:
        """Answer the run's question with the original's answer (an escalation that is
        not a question ends the replay: it waits for a person)."""
        esc = s.escalation
        assert esc is not None
        if not esc.is_question:
            raise Diverged(Divergence(s.run_id, s.step or "", "wait",
                                      f"the replay escalated to a person: {esc.reason}"))
        tape = self.session.tape(s.run_id)
        found = tape.answer() if tape is not None else None
        if found is None:
            raise Diverged(self._missing(s, f"an answer to {esc.question!r}"))
        answer, who = found
        signed = sign_decision(
            self._signer(who, esc.required_role), request_id=str(esc.request_id),
            run_id=s.run_id, tenant_id=self.tenant_id, tool="", args_hash="",
            decision="answer", answer=answer,
            expires_at=esc.expires_at or self.clock.now() + 86_400.0, approver_id=who,
        )
        self.engine.client.submit_decision(signed.model_dump(mode="json"),
                                           tenant_id=self.tenant_id)



@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One run of a batch replay: its result, or why it could not be replayed."""

    run_id: str
    result: ReplayResult | None
    error: str | None = None


async def replay_runs(
    store: Store, *, flow: str, since: float, until: float | None = None, limit: int = 100,
    flows: Iterable[Flow[Any, Any]], tools: Iterable[Tool] = (),
    policy: Policy | None = None, model: Model | None = None,
    on_divergence: OnDivergence = "stop", environment: str | None = None,
    tenant_id: str = "default", guard: GuardOptions | None = None,
) -> list[BatchEntry]:
    """Replay (:func:`replay_run`) the tenant's runs of ``flow``, newest first.

    A run that cannot be replayed (its payloads purged, a flow the new code lacks) is
    reported with why. The others go on.

    Args:
        store: The store.
        flow: The flow whose runs are replayed.
        since: Only runs created at or after it (epoch seconds).
        until: Only runs created before it.
        limit: The most runs replayed.
        flows: The new code's flows.
        tools: The new code's tools.
        policy: In place of every flow's and the engine's; None keeps the code's own.
        model: In place of every model the steps ask; None serves the recorded responses.
        on_divergence: ``stop`` at a call the original did not make, or ``stub`` it.
        environment: The environment to decide in. None: the one each run's journal
            records, else ``guard``'s.
        tenant_id: The runs' tenant.
        guard: The worker's guard settings, as for :func:`replay_run`.
    """
    code, kit = list(flows), list(tools)
    found: list[BatchEntry] = []
    after: tuple[float, str] | None = None
    while len(found) < limit:
        page = min(100, limit - len(found))
        rows = await run_io(store, functools.partial(
            store.list_runs, tenant_id, flow=flow, since=since, until=until, limit=page,
            after=after))
        for row in rows:
            try:
                result = await replay_run(
                    store, row.run_id, flows=code, tools=kit, policy=policy, model=model,
                    on_divergence=on_divergence, environment=environment,
                    tenant_id=tenant_id, guard=guard)
                found.append(BatchEntry(row.run_id, result))
            except ConfigurationError as exc:
                found.append(BatchEntry(row.run_id, None, str(exc)))
        if len(rows) < page:
            break
        after = (rows[-1].created_at, rows[-1].run_id)
    return found
