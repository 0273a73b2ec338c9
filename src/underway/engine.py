"""Executing runs: load checkpoint + tail, run a step, append its events, checkpoint.

One *activation* holds a run's lease and advances it until it waits, finishes or needs a
person. Events are buffered and committed together at the points where durability
matters: before a mutating effect runs (its intent), after a model responds, and at the
end of each step (outcome, ``StepCompleted`` and, when due, a checkpoint), all fenced by
the lease token.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

from . import events as ev
from . import faults
from .clock import Clock, SystemClock
from .codec import Codec
from .effects import COMPENSATE_SUFFIX, CallInfo, Model, Tool, args_hash, idempotency_key
from .errors import (
    ConfigurationError,
    FencedError,
    NonDeterminismError,
    RunCancelledSignal,
    RunNotFound,
    ToolCallError,
)
from .errors import is_store_failure as _is_store_failure
from .events import JSON, canonical_json, genesis_hash
from .flow import Done, Fail, Flow, Goto, Next, RunContext, Sleep, Wait
from .guard import Guard, call_counts, call_usage, money_refusal
from .identity import worker_identity
from .journal import Journal
from .jsonpatch import make_patch
from .secrets import SecretProvider, mask, resolve
from .state import (
    ANSWER_SIGNAL,
    APPROVAL_SIGNAL,
    REFUSAL_ERRORS,
    Recorded,
    RunState,
    apply,
    request_id_for,
    shadow_result,
)
from .store.base import (
    AppendBatch,
    Lease,
    NewRun,
    RunRecord,
    RunUpdate,
    SignalRecord,
    Store,
)

if TYPE_CHECKING:
    from .approvals.notify import Notifier
    from .budgets import Budget
    from .policy import Policy

CANCEL = "underway.cancel"
"""Control signal: cancel the run at its next step boundary."""
_T = TypeVar("_T")

RESOLVE = "underway.resolve"
"""Control signal: a person resolved the run's escalation."""
RESUME = "underway.resume"
"""Control signal: an operator resumes a dead run."""
IDLE_CLAIM_BACKOFF = 300.0
"""Seconds before a run claimed with nothing to do, and no wake time of its own, is due
again (a row that disagrees with its journal)."""


class _Suspend(BaseException):
    """Ends a step without completing it: a retry timer was set (events already buffered)."""


class _DeadLetter(BaseException):
    """Stops the run for an operator: the reason is journaled as ``RunDeadLettered``."""

    def __init__(self, reason: str, error_type: str) -> None:
        super().__init__(reason)
        self.reason, self.error_type = reason, error_type


class _Escalate(BaseException):
    """Stops the run for a person (user code cannot swallow it: not an Exception)."""

    def __init__(
        self, reason: str, key: str | None, tool: str | None, index: int | None,
        cause: str = "other",
    ) -> None:
        super().__init__(reason)
        self.event = ev.Escalated(reason=reason, key=key, tool=tool, index=index, cause=cause)

    @classmethod
    def about(cls, event: ev.Escalated) -> _Escalate:
        """Escalate with a fully formed event (a question)."""
        esc = cls(event.reason, event.key, event.tool, event.index, event.cause)
        esc.event = event
        return esc


class _Unencodable(BaseException):
    """Something the step produced cannot be journaled (a result, a value or evidence that
    is not JSON): the activation's uncommitted events are dropped and the run is
    dead-lettered with the reason, instead of failing in every commit forever."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Stop(BaseException):
    """Ends the run with an event already chosen (a budget that fails the run)."""

    def __init__(self, event: ev.Event) -> None:
        super().__init__(str(event))
        self.event = event


@dataclass
class _Activation:
    """A leased run being advanced: its folded state and the events not yet committed."""

    engine: Engine
    lease: Lease
    state: RunState
    last_hash: str
    checkpoint_seq: int
    pending: list[tuple[int, float, ev.Event]] = field(default_factory=list)
    consumed: list[str] = field(default_factory=list)
    control_pending: bool = False
    due_at: float | None = None
    """The run row's ``next_wake_at`` when claimed (in the past: the run was due)."""
    row_status: str = "ready"
    """The status the run row shows; the row is rewritten only when this must change."""
    lost: bool = False
    """Set by the heartbeat when the lease was lost to another worker."""
    after_commit: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Work that must wait until the buffered events are durable (notifications)."""
    store_error: Exception | None = None
    """A database failure met inside a step: the activation ends and the run is handed
    back (never dead-lettered: the run did nothing wrong), even if step code caught it."""

    async def store(self, fn: Callable[..., _T], *args: Any) -> _T:
        """A store call made while a step runs (remembered if it fails)."""
        try:
            return await self.engine.io(fn, *args)
        except Exception as exc:
            self.store_error = exc
            raise

    def buffer(self, event: ev.Event) -> None:
        at = self.engine.clock.now()
        seq = self.state.seq + 1
        apply(self.state, Recorded(seq, at, event))
        self.pending.append((seq, at, event))

    async def commit(self, *, release: bool = False, force_checkpoint: bool = False) -> None:
        if not self.pending:
            return
        eng, s = self.engine, self.state
        blobs: dict[str, bytes] = {}
        try:
            checkpoint = None
            if force_checkpoint or release or s.seq - self.checkpoint_seq >= eng.checkpoint_every:
                # The last event commits to the checkpoint's digest: see underway.checkpoint.
                stored, checkpoint = eng.journal.encode_checkpointed(
                    s, self.pending, self.last_hash, blobs
                )
            else:
                stored = eng.journal.encode(s.tenant_id, self.pending, self.last_hash, blobs)
        except (TypeError, ValueError) as exc:
            kinds = sorted({type(e).__name__ for _, _, e in self.pending})
            raise _Unencodable(
                f"the step produced data that cannot be journaled ({exc}) in one of "
                f"{', '.join(kinds)}; return and record only JSON values"
            ) from exc
        fresh = eng.journal.unknown_blobs(s.tenant_id, blobs)
        now = eng.clock.now()
        # The run row is a projection: a step that leaves the run ready and leased changes
        # nothing a reader of the row needs, so only its events are written.
        update = (
            _run_update(s, now, self.due_at)
            if release or s.status != self.row_status else None
        )
        batch = AppendBatch(
            tenant_id=s.tenant_id,
            run_id=s.run_id,
            expected_seq=self.pending[0][0] - 1,
            fence=self.lease.token,
            events=stored,
            now=now,
            update=update,
            blobs=fresh,
            checkpoint=checkpoint,
            consumed_signals=self.consumed,
            release=release,
        )
        faults.point("append.before_commit")
        self.control_pending = await self.store(eng.store.append, batch)
        faults.point("append.after_commit")
        eng.journal.remember(s.tenant_id, fresh)
        self.last_hash = stored[-1].hash
        if update is not None:
            self.row_status = update.status
        if checkpoint is not None:
            self.checkpoint_seq = checkpoint[0]
        self.pending, self.consumed = [], []
        todo, self.after_commit = self.after_commit, []
        for fn in todo:
            await fn()


def _run_update(s: RunState, now: float, due_at: float | None) -> RunUpdate:
    if s.status == "ready":
        # A ready run keeps the due time it was claimed with: it stays claimable if this
        # worker dies, and an unchanged indexed column spares index writes on every step.
        return RunUpdate("ready", s.step, due_at if due_at is not None else now)
    if s.status == "waiting":
        wake = s.wake_at
        if s.deadline is not None and not s.deadline_escalated:
            wake = s.deadline if wake is None else min(wake, s.deadline)
        return RunUpdate("waiting", s.step, wake, s.waiting_signal)
    if s.status == "escalated":
        reason = s.escalation.get("reason") if s.escalation else None
        # A question that expires is woken then, to tell the step nobody answered.
        return RunUpdate("escalated", s.step, question_expiry(s), None, str(reason))
    return RunUpdate(s.status, s.step, None, None, s.error)


def question_expiry(s: RunState) -> float | None:
    """When the question the run waits on expires (None: it is no question, or it never
    expires)."""
    esc = s.escalation
    if s.status != "escalated" or esc is None or esc.get("cause") != "question":
        return None
    at = esc.get("expires_at")
    return float(at) if isinstance(at, int | float) else None


class StepExecution:
    """The engine side of a :class:`RunContext`: memoized calls and journaled values."""

    def __init__(self, act: _Activation, step: str) -> None:
        self._act = act
        s = act.state
        self.run_id, self.tenant_id, self.step = s.run_id, s.tenant_id, step
        self.attempt = s.attempt
        self.idempotency_key = s.idempotency_key
        # A loop revisits a step: keys must differ per visit, yet not per attempt.
        self.ordinal = s.steps_completed
        self.signal = s.signal
        self.timed_out = s.timed_out
        self.clock = act.engine.clock.now
        self._calls = 0
        self._values = 0
        self.broken: NonDeterminismError | None = None
        self._decision: str | None = None

    def _record(self, index: int, kind: str, args: str) -> Any:
        rec = self._act.state.call(index)
        if rec is None or (rec.status == "retry" and not rec.tool):
            return rec
        # A held call whose arguments changed is refused by the caller, not a replay bug.
        held = rec.status in ("awaiting", "approved")
        if rec.tool != kind or (
            not held and rec.args_hash and args and rec.args_hash != args
        ):
            self.broken = NonDeterminismError(
                self.run_id, self.step, index, f"{rec.tool}({rec.args_hash[:12]})",
                f"{kind}({args[:12]})",
            )
            raise self.broken
        return rec

    async def call(
        self, tool: Tool | str, args: JSON, *, labels: frozenset[str] = frozenset(),
        evidence: JSON = None, risks: list[str] | None = None,
    ) -> JSON:
        t = self._act.engine.tool(tool)
        index = self._calls
        self._calls += 1
        try:
            h = args_hash(t.name, args)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"arguments to tool {t.name!r} in step {self.step!r} are not JSON: {exc}"
            ) from exc
        rec = self._record(index, t.name, h)
        # A call already journaled keeps the key it was journaled with, even if this
        # version of the engine would derive keys differently.
        key = rec.key if rec is not None and rec.key else idempotency_key(
            self.run_id, self.step, index, ordinal=self.ordinal
        )
        if rec is not None and rec.status == "succeeded":
            return rec.result
        if rec is not None and rec.status == "failed":
            if rec.maybe_happened:
                # An earlier attempt may have taken effect and the attempt after it was
                # refused: the step must not be told the call failed.
                self._unknown(t, key, index, f"and trying it again was refused: {rec.message}")
            raise ToolCallError(
                t.name, rec.error_type or "Error", rec.message or "", retryable=rec.retryable
            )
        if rec is not None and rec.status in ("awaiting", "approved") and rec.args_hash != h:
            self._refuse(t, key, index, h, "approval_invalid",
                         "the arguments differ from those the approval was requested for")
        if rec is not None and rec.status == "awaiting":
            raise _Escalate(f"call {key} of {t.name!r} awaits an approval but the run went on; "
                            "resolve with retry to ask again", key, t.name, index)
        if rec is not None and rec.status == "started":
            # Unknown outcome: the intent is journaled, the outcome is not.
            settled = await self._settle_unknown(t, args, key, index, h)
            if settled is not None:
                return settled[0]
        return await self._door(t, args, key, index, h, rec, labels, evidence, risks or [])

    async def _door(
        self, t: Tool, args: JSON, key: str, index: int, h: str, rec: Any,
        labels: frozenset[str], evidence: JSON, risks: list[str],
    ) -> JSON:
        """The one door every execution of a tool passes through — a first attempt, a
        retry after an error or a back-off, after a resolution or a resume, a re-run after
        a crash or after ``reconcile`` said the effect did not happen: the whole guard at
        this moment (allow-list, schema, budgets, policy, an approval verified now), then
        the circuit, the journaled intent, and the call."""
        maybe_happened = rec is not None and rec.maybe_happened
        try:
            shadowed = await self._guard(t, args, key, index, h, rec, labels, evidence, risks)
        except ToolCallError as exc:
            if maybe_happened:
                self._unknown(t, key, index, f"and trying it again was refused: {exc.message}")
            raise
        except Exception as exc:
            if _is_store_failure(exc):
                # The database's failure, not the run's: hand the run back, try later.
                self._act.store_error = exc
                raise
            # Whatever the guard cannot interpret is a refusal, never a pass.
            self._refuse(t, key, index, h, "guard_error",
                         f"the guard could not decide on this call: {type(exc).__name__}: {exc}")
        if shadowed:
            return shadow_result(t.name)
        await self._admit(t, key, index, h)
        # A re-run after a crash reuses the intent already journaled (same key, same args).
        if t.mutating and (rec is None or rec.status != "started"):
            self._act.buffer(ev.ToolStarted(
                key=key, tool=t.name, index=index, args=args, args_hash=h,
                sandbox_profile=t.sandbox.digest() if t.sandbox is not None else None,
                policy_decision=self._decision,
            ))
            await self._act.commit()
        try:
            result = await self._execute(t, args, key, index, h)
        except ToolCallError as exc:
            await self._settle_circuit(t, exc.error_type)
            if t.mutating and exc.error_type in _LOST_TRACK:
                return await self._timed_out(t, args, key, index, h, exc)
            self._retry_or_raise(t, key, index, exc)
            raise
        await self._settle_circuit(t, None)
        return result

    async def _settle_unknown(
        self, t: Tool, args: JSON, key: str, index: int, h: str
    ) -> tuple[JSON] | None:
        """Settle a call whose intent is journaled and whose outcome is not: ``(result,)``
        when ``reconcile`` found it happened; None when it must run again through the door
        (an idempotent tool with the same key, or ``reconcile`` found it did not happen);
        otherwise the run escalates to a person."""
        if t.idempotent:
            return None
        if t.reconcile is None:
            self._unknown(t, key, index, "and it has no reconcile hook; confirm whether it "
                                         "happened")
        found = await t.reconcile(key)
        if found.outcome == "happened":
            self._act.buffer(ev.ToolSucceeded(
                key=key, tool=t.name, index=index, args_hash=h, result=found.result,
                reconciled=True, counts=call_counts(t, args),
            ))
            return (found.result,)
        if found.outcome == "unknown":
            self._unknown(t, key, index, "and its reconcile hook could not tell whether it "
                                         "took effect")
        self._act.buffer(ev.ToolReconciled(key=key, tool=t.name, index=index, args_hash=h))
        return None

    async def _timed_out(
        self, t: Tool, args: JSON, key: str, index: int, h: str, exc: ToolCallError
    ) -> JSON:
        """A mutating call timed out or lost its connection: it may have happened. An
        idempotent tool is tried again with the same key on its retry policy (durable
        timer); ``reconcile`` is asked; else — or once retries are spent — a person
        decides. Never retried blindly, never recorded as not having happened."""
        if t.idempotent:
            self._retry_or_raise(t, key, index, exc)
            self._unknown(t, key, index, f"after {exc.error_type}: {exc.message}")
        settled = await self._settle_unknown(t, args, key, index, h)
        if settled is not None:
            return settled[0]
        # reconcile says it did not happen: now it is an ordinary failure.
        self._retry_or_raise(t, key, index, exc)
        raise exc

    def _unknown(self, t: Tool, key: str, index: int, why: str) -> NoReturn:
        raise _Escalate(
            f"outcome of tool {t.name!r} (key {key}) is unknown {why}",
            key, t.name, index, cause="unknown_outcome",
        )

    def _refuse(self, t: Tool, key: str, index: int, h: str, cause: str, reason: str) -> NoReturn:
        self._act.buffer(ev.ToolRefused(
            key=key, tool=t.name, index=index, args_hash=h, cause=cause,
            reason=reason,
        ))
        raise ToolCallError(t.name, REFUSAL_ERRORS[cause], reason, retryable=False)

    async def _guard(
        self, t: Tool, args: JSON, key: str, index: int, h: str, rec: Any,
        labels: frozenset[str], evidence: JSON, risks: list[str],
    ) -> bool:
        """Allow-list, schema, budgets, policy, approval and shadow mode, in that order;
        True when the call is shadowed (journaled, not executed)."""
        act, eng = self._act, self._act.engine
        s, flow, guard = act.state, eng._flow(act.state.flow), eng.guard
        self._decision = None
        if flow.allowed_tools is not None and _allowed_name(t.name) not in flow.allowed_tools:
            self._refuse(t, key, index, h, "not_allowed",
                         f"tool {t.name!r} is not on the allow-list of flow {flow.name!r}")
        if t.args_model is not None:
            try:
                t.args_model.model_validate(args)
            except ValidationError as exc:
                self._schema_failed(t, key, index, "args", exc)
        unreadable = money_refusal(t, args)
        if unreadable is not None:
            self._refuse(t, key, index, h, "policy_denied", unreadable)
        now = eng.clock.now()
        if guard.has_budget(flow):
            over = guard.over_budget(flow, eng.store, s, call_usage(t, args), now,
                                     [e for _, _, e in act.pending])
            if over is not None:
                self._over_budget(over[0], over[1], t.name)
        policy = guard.policy_for(flow)
        shadow = t.mutating and guard.shadow_for(flow)
        if policy is None:
            # No policy: nothing to decide or journal; the call goes ahead (or is shadowed).
            if shadow:
                act.buffer(ev.ToolShadowed(
                    key=key, tool=t.name, index=index, args=args, args_hash=h, decision="allow",
                ))
            return shadow
        d = guard.decide(flow, eng.store, s, t, args, labels, now)
        act.buffer(ev.PolicyDecided(
            key=key, tool=t.name, index=index, args_hash=h, decision=d.outcome,
            rule_id=d.rule_id, policy_version=d.policy_version, reason=d.reason,
            policy_digest=policy.digest,
        ))
        if d.outcome == "deny":
            self._refuse(t, key, index, h, "policy_denied",
                         d.reason or f"denied by policy rule {d.rule_id}")
        if d.outcome == "require_approval" and not shadow and key in s.approvals:
            # Approved before: the approval must still hold for exactly this call, now.
            reason = await eng.verify_approval(s, key, t.name, h)
            if reason is not None:
                cause = "approval_expired" if reason == "expired" else "approval_invalid"
                self._refuse(t, key, index, h, cause,
                             f"the approval of this call no longer holds: {reason}")
            self._decision = "approved"
            return False
        if d.outcome == "require_approval" and not shadow:
            ttl = d.expires_in if d.expires_in is not None else guard.approval_ttl
            asked = rec.approval_requests if rec is not None and rec.key == key else 0
            request = ev.ApprovalRequested(
                request_id=request_id_for(key, asked + 1), key=key, tool=t.name, index=index,
                args=args, args_hash=h, evidence=evidence, risks=risks,
                required_role=d.approver_role, expires_at=now + ttl, rule_id=d.rule_id,
                policy_version=d.policy_version,
            )
            act.buffer(request)
            if guard.notifier is not None:
                act.after_commit.append(functools.partial(eng.notify, s, request))
            raise _Suspend
        self._decision = d.outcome if d.rule_id is not None else None
        if shadow:
            act.buffer(ev.ToolShadowed(
                key=key, tool=t.name, index=index, args=args, args_hash=h, decision=d.outcome,
            ))
            return True
        return False

    def _over_budget(self, budget: Budget, exceeded: Any, tool: str | None) -> NoReturn:
        action = budget.on_exceed
        self._act.buffer(ev.BudgetExceeded(
            metric=exceeded.metric, limit=float(exceeded.limit), used=float(exceeded.used),
            scope=exceeded.scope, action=action, tool=tool,
        ))
        reason = (
            f"{exceeded.scope} budget for {exceeded.metric} would be exceeded "
            f"(limit {exceeded.limit:g}, would reach {exceeded.used:g})"
            + (f" by a call of {tool!r}" if tool else "")
        )
        if action == "fail":
            raise _Stop(ev.RunFailed(reason=reason, error_type="BudgetExceeded", step=self.step))
        raise _Escalate(reason + "; raise the budget and resolve with retry, or cancel",
                        None, tool, None, cause="budget")

    async def ask(self, question: str, *, context: JSON, role: str | None,
                  expires_in: float | None = None) -> JSON:
        index = self._calls
        self._calls += 1
        rec = self._record(index, "ask", "")
        if rec is not None and rec.status == "succeeded":
            return rec.result
        if rec is not None and rec.status == "failed":
            raise ToolCallError("ask", rec.error_type or "QuestionExpired", rec.message or "",
                                retryable=False)
        key = rec.key if rec is not None and rec.key else idempotency_key(
            self.run_id, self.step, index, ordinal=self.ordinal
        )
        event = ev.Escalated(
            reason=f"question: {question}", key=key, tool="ask", index=index,
            cause="question", request_id=request_id_for(key), question=question,
            context=context, required_role=role,
            expires_at=None if expires_in is None else self._act.engine.clock.now() + expires_in,
        )
        eng = self._act.engine
        if eng.guard.notifier is not None:
            self._act.after_commit.append(
                functools.partial(eng.notify, self._act.state, event)
            )
        raise _Escalate.about(event)

    async def _admit(self, t: Tool, key: str, index: int, h: str) -> None:
        """Fail fast, journaled as ``CircuitOpen``, when the tool's circuit is open."""
        if t.circuit is None:
            return
        eng = self._act.engine
        verdict = await self._act.store(functools.partial(
            eng.store.circuit_admit, t.circuit.scope(self.tenant_id), t.name,
            now=eng.clock.now(), cooldown=t.circuit.cooldown,
        ))
        if verdict != "open":
            return
        message = f"circuit of tool {t.name!r} is open after repeated failures; re-plan or wait"
        self._act.buffer(ev.ToolFailed(
            key=key, tool=t.name, index=index, args_hash=h, error_type="CircuitOpen",
            message=message, retryable=False,
        ))
        raise ToolCallError(t.name, "CircuitOpen", message, retryable=False)

    async def _settle_circuit(self, t: Tool, error_type: str | None) -> None:
        """Tell the shared circuit how the call went (schema errors are not the tool's fault)."""
        if t.circuit is None or error_type in ("CircuitOpen", "SchemaValidationFailed"):
            return
        eng = self._act.engine
        await self._act.store(functools.partial(
            eng.store.circuit_record, t.circuit.scope(self.tenant_id), t.name,
            ok=error_type is None, now=eng.clock.now(),
            threshold=t.circuit.failure_threshold, cooldown=t.circuit.cooldown,
        ))

    def _retry_or_raise(self, t: Tool, key: str, index: int, exc: ToolCallError) -> None:
        """Schedule the next attempt on a durable timer (suspending the step), or return so
        the failure reaches the step."""
        policy = t.retry
        if policy is None or exc.error_type in ("SchemaValidationFailed", "CircuitOpen"):
            return
        if not policy.retries(exc.error_type, exc.retryable):
            return
        s, eng = self._act.state, self._act.engine
        rec = s.call(index)
        attempts = rec.attempts if rec is not None else 1
        if attempts >= policy.max_attempts:
            return
        if eng.retry_budget is not None and s.retries >= eng.retry_budget:
            raise _DeadLetter(
                f"retry budget of {eng.retry_budget} retries per run is exhausted; last: "
                f"{t.name} failed with {exc.error_type}: {exc.message}",
                "RetryBudgetExhausted",
            )
        delay = policy.delay(attempts + 1, random.random(), hint=exc.retry_after)
        timer = f"retry-{s.seq + 1}"
        self._act.buffer(ev.RetryScheduled(
            key=key, tool=t.name, index=index, attempt=attempts + 1, timer_id=timer,
            delay_s=delay,
        ))
        self._act.buffer(ev.TimerSet(timer_id=timer, wake_at=eng.clock.now() + delay))
        raise _Suspend

    async def _execute(self, t: Tool, args: JSON, key: str, index: int, h: str) -> JSON:
        s = self._act.state
        secrets = resolve(self._act.engine.guard.secrets, t.secrets)
        info = CallInfo(key, self.tenant_id, self.run_id, self.step, index,
                        self._act.lease.token, s.principal, tuple(s.roles), secrets)
        faults.point("effect.before_run")
        began = time.perf_counter()
        try:
            result = await t.invoke(args, info)
        except TimeoutError:
            self._act.buffer(ev.ToolTimedOut(
                key=key, tool=t.name, index=index, args_hash=h, timeout_s=t.timeout
            ))
            raise ToolCallError(
                t.name, "ToolTimedOut", f"timed out after {t.timeout}s", retryable=True
            ) from None
        except Exception as exc:
            if t.mutating and _lost_track(exc):
                message = mask(str(exc), secrets) or type(exc).__name__
                self._act.buffer(ev.ToolOutcomeUnknown(
                    key=key, tool=t.name, index=index, args_hash=h,
                    error_type=type(exc).__name__, message=message,
                ))
                raise ToolCallError(t.name, "OutcomeUnknown", message, retryable=True) from None
            # With a retry policy a failure is retryable unless the error says otherwise.
            retryable = bool(getattr(exc, "retryable", t.retry is not None))
            message = mask(str(exc), secrets)
            self._act.buffer(ev.ToolFailed(
                key=key, tool=t.name, index=index, args_hash=h, error_type=type(exc).__name__,
                message=message, retryable=retryable,
                latency_ms=(time.perf_counter() - began) * 1000,
            ))
            raise ToolCallError(
                t.name, type(exc).__name__, message, retryable=retryable,
                retry_after=getattr(exc, "retry_after", None),
            ) from (None if secrets else exc)
        faults.point("effect.after_run")
        latency = (time.perf_counter() - began) * 1000
        try:
            if t.result_model is not None:
                result = t.result_model.model_validate(result).model_dump(mode="json")
            canonical_json(result)
        except ValidationError as exc:
            self._schema_failed(t, key, index, "result", exc)
        except (TypeError, ValueError) as exc:
            self._act.buffer(ev.SchemaValidationFailed(
                key=key, tool=t.name, index=index, where="result",
                errors=[{"msg": f"result is not JSON: {exc}"}],
            ))
            raise ToolCallError(
                t.name, "SchemaValidationFailed", f"result is not JSON: {exc}", retryable=False
            ) from exc
        self._act.buffer(ev.ToolSucceeded(
            key=key, tool=t.name, index=index, args_hash=h, result=result, latency_ms=latency,
            counts=call_counts(t, args),
        ))
        return result

    def _schema_failed(
        self, t: Tool, key: str, index: int, where: Literal["args", "result"],
        exc: ValidationError,
    ) -> NoReturn:
        self._act.buffer(ev.SchemaValidationFailed(
            key=key, tool=t.name, index=index, where=where,
            errors=json.loads(exc.json(include_url=False)),
        ))
        raise ToolCallError(
            t.name, "SchemaValidationFailed", f"{where} do not match the schema: {exc}",
            retryable=False,
        ) from exc

    async def model(self, model: Model, request: JSON) -> JSON:
        index = self._calls
        self._calls += 1
        rec = self._record(index, "model", "")
        if rec is not None and rec.status == "succeeded":
            return rec.result
        key = idempotency_key(self.run_id, self.step, index, ordinal=self.ordinal)
        eng = self._act.engine
        flow = eng._flow(self._act.state.flow)
        if eng.guard.has_budget(flow):
            from .budgets import Usage

            over = eng.guard.over_budget(
                flow, eng.store, self._act.state, Usage(model_calls=1), eng.clock.now(),
                [e for _, _, e in self._act.pending],
            )
            if over is not None:
                self._over_budget(over[0], over[1], None)
        self._check_route_budget(model, request)
        began = time.perf_counter()
        try:
            reply = await model.complete(request)
        except Exception as exc:
            if not getattr(exc, "retryable", False):
                raise
            self._retry_model(key, index, rec, exc)
        self._act.buffer(ev.ModelResponded(
            key=key, index=index, model=reply.model, request=request, response=reply.response,
            tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, cost_usd=reply.cost_usd,
            latency_ms=(time.perf_counter() - began) * 1000,
        ))
        await self._act.commit()
        return reply.response

    def _check_route_budget(self, model: Model, request: JSON) -> None:
        """A :class:`~underway.models.ModelRouter` with route budgets: refuse a call whose
        route has spent its budget in this run (usage folded from the journal)."""
        from .models.routing import ModelRouter, RouteUsage, budget_breaches

        if not isinstance(model, ModelRouter) or not model.budgets:
            return
        kind = request.get("kind", "default") if isinstance(request, dict) else "default"
        route = model.route(str(kind))
        if route not in model.budgets:
            return
        used = RouteUsage()
        for k, u in self._act.state.model_usage.items():
            if model.route(k) == route:
                used = RouteUsage(
                    used.calls + int(u["calls"]), used.tokens_in + int(u["tokens_in"]),
                    used.tokens_out + int(u["tokens_out"]), used.cost_usd + float(u["cost_usd"]),
                )
        found = budget_breaches({route: used}, {route: model.budgets[route]})
        if found:
            b = found[0]
            self._act.buffer(ev.BudgetExceeded(
                metric=f"route.{route}.{b.limit}", limit=float(b.allowed), used=float(b.used),
                scope="run", action="escalate",
            ))
            raise _Escalate(
                f"model route {route!r} has spent its budget ({b}); raise the RouteBudget "
                "and resolve with retry, or cancel", None, None, None, cause="budget",
            )

    def _retry_model(self, key: str, index: int, rec: Any, exc: Exception) -> NoReturn:
        """A provider's transient failure (rate limit, outage) that outlasted the adapter's
        own retries: wait on a durable timer, holding no worker, then ask again."""
        s, eng = self._act.state, self._act.engine
        attempt = (rec.attempts if rec is not None else 1) + 1
        if eng.retry_budget is not None and s.retries >= eng.retry_budget:
            raise _DeadLetter(
                f"retry budget of {eng.retry_budget} retries per run is exhausted; last: "
                f"model call failed with {type(exc).__name__}: {exc}", "RetryBudgetExhausted",
            )
        hinted = getattr(exc, "retry_after", None)
        delay = (float(hinted) if hinted
                 else min(600.0, 2.0 ** attempt) * (0.5 + random.random() / 2))
        timer = f"retry-{s.seq + 1}"
        self._act.buffer(ev.RetryScheduled(
            key=key, tool="model", index=index, attempt=attempt, timer_id=timer, delay_s=delay,
        ))
        self._act.buffer(ev.TimerSet(timer_id=timer, wake_at=eng.clock.now() + delay))
        raise _Suspend

    def note(self, event: ev.PlanCreated | ev.PlanRevised | ev.ToolSelected) -> bool:
        """Journal an agent's own event once (a re-run of the step does not repeat it);
        True when it was new."""
        index = self._values
        self._values += 1
        if index < len(self._act.state.values):
            return False
        self._act.buffer(event)
        return True

    def value(self, kind: Any, fresh: JSON) -> JSON:
        index = self._values
        self._values += 1
        values = self._act.state.values
        if index < len(values):
            return values[index]
        self._act.buffer(ev.ValueRecorded(kind=kind, index=index, value=fresh))
        return fresh


class Engine:
    """Runs flows against a store. Use one engine per process; it is not a singleton.

    ``lease_ttl``: seconds a lease lasts unless renewed (heartbeats renew it while a step
    runs). ``checkpoint_every``: write a checkpoint at least every this many events (and
    always when a run leaves the worker: waiting, escalated, dead or finished).
    ``retry_budget``: retries one run may spend across all its tools before it stops dead
    (``None``: no limit). ``offload_io``: run store round trips on threads, for many
    concurrent activations on one event loop (a :class:`~underway.worker.Worker` sets it).
    """

    def __init__(
        self,
        store: Store,
        *,
        flows: Iterable[Flow[Any, Any]] = (),
        tools: Iterable[Tool] = (),
        clock: Clock | None = None,
        codec: Codec | None = None,
        owner: str | None = None,
        lease_ttl: float = 30.0,
        checkpoint_every: int = 100,
        retry_budget: int | None = 100,
        offload_io: bool = False,
        guard: Guard | None = None,
        policy: Policy | None = None,
        environment: str | None = None,
        budget: Budget | None = None,
        tenant_budget: Budget | None = None,
        shadow: bool | None = None,
        secrets: SecretProvider | None = None,
        notifier: Notifier | None = None,
        signed_resolutions: bool | None = None,
    ) -> None:
        self.guard = guard or Guard()
        for name, value in (
            ("policy", policy), ("environment", environment), ("budget", budget),
            ("tenant_budget", tenant_budget), ("shadow", shadow), ("secrets", secrets),
            ("notifier", notifier), ("signed_resolutions", signed_resolutions),
        ):
            if value is not None:
                setattr(self.guard, name, value)
        self.store = store
        self.journal = Journal(store, codec)
        self.guard.codec = self.journal.codec
        self.clock: Clock = clock or SystemClock()
        self.flows: dict[str, Flow[Any, Any]] = {}
        self.tools: dict[str, Tool] = {}
        self.owner = owner or worker_identity()
        self.lease_ttl = lease_ttl
        self.checkpoint_every = checkpoint_every
        self.retry_budget = retry_budget
        self.offload_io = offload_io
        for f in flows:
            self.register(f)
        for t in tools:
            self.tools[t.name] = t

    async def io(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Call a store method: inline, or on a thread when ``offload_io`` is set so that
        one worker's many concurrent activations never wait on each other's database round
        trips. Encoding and decoding stay on the event loop (their caches are not shared
        across threads)."""
        if self.offload_io:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    def register(self, flow: Flow[Any, Any]) -> None:
        """Make ``flow`` runnable by this engine (and register the tools it declares)."""
        if flow.start_step is None:
            raise ConfigurationError(f"flow {flow.name!r} has no steps")
        self.flows[flow.name] = flow
        for t in flow.declared_tools:
            known = self.tools.setdefault(t.name, t)
            if known is not t:
                raise ConfigurationError(
                    f"flow {flow.name!r} declares a tool {t.name!r} but another tool of that "
                    "name is already registered"
                )

    def tool(self, ref: Tool | str) -> Tool:
        """Resolve a tool by object or registered name."""
        if isinstance(ref, Tool):
            return ref
        try:
            return self.tools[ref]
        except KeyError:
            raise ConfigurationError(
                f"no tool named {ref!r} is registered; known tools: {sorted(self.tools)}"
            ) from None

    # -- starting and steering runs -----------------------------------------------------
    def start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        tenant_id: str = "default",
        idempotency_key: str | None = None,
        run_id: str | None = None,
        start_at: float | None = None,
        queue: str = "default",
        deadline: float | None = None,
        principal: str | None = None,
        roles: Iterable[str] = (),
    ) -> tuple[str, bool]:
        """Create a run (or find the one with this idempotency key): ``(run_id, created)``.

        ``start_at`` (epoch seconds) delays the first step; ``queue`` names the queue whose
        workers run it; past ``deadline`` (epoch seconds) the run escalates to a person.
        ``principal`` and ``roles`` say whom the run acts for (policies match on them).
        """
        rec, created = self.store.create_run(self.prepare_start(
            flow, input, tenant_id=tenant_id, idempotency_key=idempotency_key, run_id=run_id,
            start_at=start_at, queue=queue, deadline=deadline, principal=principal,
            roles=roles,
        ))
        return rec.run_id, created

    def prepare_start(
        self,
        flow: Flow[Any, Any] | str,
        input: JSON | BaseModel = None,
        *,
        tenant_id: str = "default",
        idempotency_key: str | None = None,
        run_id: str | None = None,
        start_at: float | None = None,
        queue: str = "default",
        deadline: float | None = None,
        principal: str | None = None,
        roles: Iterable[str] = (),
    ) -> NewRun:
        """The run :meth:`start` would create (input checked, first event encoded), for a
        caller that creates it inside a transaction of its own (intake)."""
        if isinstance(flow, Flow) and flow.name not in self.flows:
            self.register(flow)
        f = self._flow(flow if isinstance(flow, str) else flow.name)
        if not queue:
            raise ConfigurationError("queue name must not be empty")
        parsed = f.parse_input(input)
        state = f.initial_state(parsed)
        run_id = run_id or str(uuid.uuid4())
        now = self.clock.now()
        event = ev.RunStarted(
            flow=f.name, input=parsed.model_dump(mode="json"),
            state=state.model_dump(mode="json"), first_step=str(f.start_step),
            idempotency_key=idempotency_key, deadline=deadline, principal=principal,
            roles=sorted(set(roles)), signals=None if f.signals is None else sorted(f.signals),
        )
        blobs: dict[str, bytes] = {}
        stored = self.journal.encode(
            tenant_id, [(1, now, event)], genesis_hash(tenant_id, run_id), blobs
        )
        return NewRun(
            tenant_id=tenant_id, run_id=run_id, flow=f.name, idempotency_key=idempotency_key,
            first_event=stored[0], blobs=blobs, step=str(f.start_step), now=now,
            next_wake_at=start_at if start_at is not None else now, queue=queue,
        )

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
        """Deliver a signal (once per ``signal_id``); False when it was a duplicate.

        When the run's flow declares its signals (``Flow(signals=[...])``), a name it does
        not declare is refused with :class:`ConfigurationError` (no step would ever read
        it), unless the run is waiting for exactly that name right now.
        """
        if name.startswith("underway."):
            raise ConfigurationError(
                f"signal names starting with 'underway.' are reserved ({name!r}); use "
                "cancel() or resolve() for those"
            )
        self.check_signal(run_id, name, tenant_id=tenant_id)
        return self._send(run_id, name, payload, tenant_id, signal_id, sender)

    def declared_signals(self, run_id: str, *, tenant_id: str = "default") -> frozenset[str] | None:
        """The signal names the run's flow declares (None: it declares none). The flow
        registered with this engine answers; a process without the flow's code (the CLI)
        reads the declaration journaled when the run started."""
        row = self.store.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        return self._declared(row)

    def _declared(self, row: RunRecord) -> frozenset[str] | None:
        flow = self.flows.get(row.flow)
        if flow is not None:
            return flow.signals
        journaled = self.journal.load(row.tenant_id, row.run_id).signals
        return None if journaled is None else frozenset(journaled)

    def check_signal(self, run_id: str, name: str, *, tenant_id: str = "default") -> None:
        """Raise :class:`ConfigurationError` when the run's flow declares its signals and
        ``name`` is none of them (and not the signal the run waits for now); raise
        :class:`RunNotFound` for an unknown run."""
        row = self.store.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
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
        if self.store.get_run(tenant_id, run_id) is None:
            raise RunNotFound(tenant_id, run_id)
        return self.store.send_signal(SignalRecord(
            tenant_id, run_id, signal_id or str(uuid.uuid4()), name,
            canonical_json(payload), sender, self.clock.now(),
        ))

    def cancel(self, run_id: str, *, by: str, reason: str = "", tenant_id: str = "default") -> None:
        """Ask for the run to be cancelled at its next step boundary."""
        self._send(run_id, CANCEL, {"by": by, "reason": reason}, tenant_id, None, by)

    def resolve(
        self,
        run_id: str,
        *,
        resolution: str,
        by: str,
        result: JSON = None,
        tenant_id: str = "default",
    ) -> None:
        """Resolve an escalation: the effect ``succeeded`` (with result), ``failed``, or
        may be ``retry``-ed. Unsigned: a worker with ``signed_resolutions`` refuses it
        (journaled as ``SignalIgnored``) and waits for a signed one
        (:meth:`submit_decision` with a ``resolve`` decision)."""
        if resolution not in ("succeeded", "failed", "retry"):
            raise ConfigurationError(
                f"resolution must be 'succeeded', 'failed' or 'retry', not {resolution!r}"
            )
        row = self.store.get_run(tenant_id, run_id)
        if row is not None and row.status != "escalated":
            raise ConfigurationError(
                f"run {run_id} is {row.status}, not escalated: there is nothing to resolve"
            )
        self._send(run_id, RESOLVE, {"resolution": resolution, "result": result, "by": by},
                   tenant_id, None, by)

    def resume(
        self, run_id: str, *, by: str, step: str | None = None, tenant_id: str = "default"
    ) -> None:
        """Resume a dead run, at ``step`` or where it stopped (its failed calls are tried
        again; completed ones are not)."""
        row = self.store.get_run(tenant_id, run_id)
        if row is None:
            raise RunNotFound(tenant_id, run_id)
        if row.status != "dead":
            raise ConfigurationError(
                f"run {run_id} is {row.status}, not dead: only dead runs can be resumed"
            )
        if step is not None and row.flow in self.flows:
            # (A process that does not know the flow — the CLI — leaves this to the worker:
            # an unknown step stops the run dead again, naming the step.)
            self.flows[row.flow].get_step(step)
        self._send(run_id, RESUME, {"by": by, "step": step}, tenant_id, None, by)

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
        from .approvals import ApprovalCheck, SignedDecision, verify_decision
        from .approvals.decision import REASON_TEXT

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
        if d.decision == "resolve" and _resolution_of(d.answer) is None \
                and _resumption_of(d.answer) is None:
            raise ConfigurationError(
                "a resolve decision's answer must be {\"resolution\": \"succeeded\" | "
                f"\"failed\" | \"retry\", \"result\": ...}} or {{\"resolution\": "
                f"\"resume\", \"step\": ...}}, not {d.answer!r}"
            )
        if self.store.get_run(tenant_id, d.run_id) is None:
            raise RunNotFound(tenant_id, d.run_id)
        # The decision checked against itself: who signed it and with what key, its expiry.
        # Whether it answers the request the run waits on is the worker's check.
        check = ApprovalCheck(
            request_id=d.request_id, run_id=d.run_id, tenant_id=tenant_id, tool=d.tool,
            args_hash=d.args_hash, required_role=None, expires_at=d.expires_at,
        )
        approver = self.store.get_approver(tenant_id, d.approver_id)
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

    def state(self, run_id: str, *, tenant_id: str = "default") -> RunState:
        """The run's current folded state."""
        return self.journal.load(tenant_id, run_id)

    # -- advancing runs -----------------------------------------------------------------
    def claim(self, *, limit: int = 1, tenant_id: str | None = None,
              run_id: str | None = None) -> list[Lease]:
        """Lease due runs for this engine's owner identity."""
        return self.store.claim(owner=self.owner, now=self.clock.now(), ttl=self.lease_ttl,
                                limit=limit, tenant_id=tenant_id, run_id=run_id)

    async def activate(
        self, lease: Lease, *, should_stop: Callable[[], bool] | None = None
    ) -> RunState:
        """Advance a leased run until it waits, finishes or escalates; return its state.

        ``should_stop`` is asked after each committed step; when it answers True the run is
        handed back at that step boundary (a stopping worker) and the state returned is
        still ``ready``.
        """
        row = self.store.get_run(lease.tenant_id, lease.run_id)
        if row is None:
            raise RunNotFound(lease.tenant_id, lease.run_id)
        state, head, refused = self.journal.load_head(lease.tenant_id, lease.run_id)
        act = _Activation(
            self, lease, state, head, state.seq, control_pending=True,
            due_at=row.next_wake_at, row_status=row.status,
        )
        if refused is not None:
            # A forged checkpoint was ignored; the journal keeps the finding, since the
            # next commit's checkpoint replaces the forged row.
            act.buffer(refused)
        flow = self._flow(state.flow)
        heartbeat = asyncio.create_task(self._heartbeat(act, asyncio.current_task()))
        try:
            while True:
                if act.control_pending:
                    await self._read_inbox(act)
                s = act.state
                expiry = question_expiry(s)
                if expiry is not None and self.clock.now() >= expiry:
                    act.buffer(ev.EscalationExpired(
                        request_id=str((s.escalation or {}).get("request_id"))
                    ))
                    s = act.state
                if self._deadline_passed(s):
                    self._escalate(act, ev.Escalated(
                        reason=f"deadline {_iso(s.deadline)} passed", cause="deadline"
                    ))
                if s.final or s.status in ("escalated", "dead") or (
                    s.status == "waiting" and (s.wake_at is None or self.clock.now() < s.wake_at)
                ):
                    await self._leave(act, idle=True)
                    return s
                if s.status == "waiting" and s.pending_approval is not None:
                    act.buffer(ev.ApprovalExpired(
                        request_id=str(s.pending_approval["request_id"])
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
        except _Unencodable as bad:
            return await self._dead_letter_afresh(act, bad.reason, "UnencodableEvent")
        except asyncio.CancelledError:
            if act.lost:
                raise FencedError(
                    f"run {lease.run_id}: lease lost while a step ran; the step was cancelled"
                ) from None
            raise
        finally:
            heartbeat.cancel()

    async def _dead_letter_afresh(
        self, act: _Activation, reason: str, error_type: str
    ) -> RunState:
        """Drop what the activation did not commit, and journal the run dead from what the
        journal holds (signals it had read stay in the inbox for later)."""
        return await self.dead_letter(act.lease, reason=reason, error_type=error_type,
                                      due_at=act.due_at)

    async def dead_letter(
        self, lease: Lease, *, reason: str, error_type: str, due_at: float | None = None
    ) -> RunState:
        """Journal a leased run dead (``RunDeadLettered``) from what its journal holds, and
        hand it back: for a run whose activation keeps failing in a way nothing journaled.
        An operator resumes or cancels it."""
        state, head, _ = await self.io(self.journal.load_head, lease.tenant_id, lease.run_id)
        if state.final or state.status == "dead":
            await self.io(self.store.release, lease)
            return state
        row = await self.io(self.store.get_run, lease.tenant_id, lease.run_id)
        fresh = _Activation(self, lease, state, head, state.seq, due_at=due_at,
                            row_status=row.status if row is not None else state.status)
        fresh.buffer(ev.RunDeadLettered(reason=reason, error_type=error_type,
                                        step=state.step))
        await fresh.commit(release=True)
        return fresh.state

    async def verify_approval(self, s: RunState, key: str, tool: str, h: str) -> str | None:
        """Check, right before an approved call runs, that its journaled approval still
        holds for exactly this call: None when it does, else the reason."""
        from .approvals import ApprovalCheck, SignedDecision, verify_decision

        held = s.approvals.get(key)
        if not isinstance(held, dict):
            return "no approval is journaled for this call"
        try:
            d = SignedDecision.model_validate(held.get("decision"))
        except ValidationError:
            return "malformed decision"
        if d.decision != "approve":
            return "decision is not an approval"
        expires = held.get("expires_at")
        check = ApprovalCheck(
            request_id=str(held.get("request_id") or request_id_for(key)), run_id=s.run_id,
            tenant_id=s.tenant_id, tool=tool, args_hash=h, required_role=held.get("required_role"),
            expires_at=float(expires) if expires is not None else d.expires_at,
        )
        approver = await self.io(self.store.get_approver, s.tenant_id, d.approver_id)
        return verify_decision(d, check=check, approver=approver, now=self.clock.now())

    def _escalate(self, act: _Activation, event: ev.Escalated) -> None:
        """Journal an escalation; once it is durable, tell approvers (a question's notice
        is sent by ``ctx.ask``, which knows more about it)."""
        act.buffer(event)
        if self.guard.notifier is not None and event.cause != "question":
            act.after_commit.append(functools.partial(self._notify_escalated, act, event))

    async def _notify_escalated(self, act: _Activation, event: ev.Escalated) -> None:
        await self.notify(act.state, event)

    async def notify(self, s: RunState, e: ev.ApprovalRequested | ev.Escalated) -> None:
        """Tell people a run waits for them — an approval request, a question or an
        escalation to resolve — once the request is durable; a notifier's failures are its
        own."""
        from .approvals.notify import ApprovalNotice

        if self.guard.notifier is None:
            return
        if isinstance(e, ev.Escalated) and e.cause != "question":
            esc = s.escalation or {}
            notice = ApprovalNotice(
                tenant_id=s.tenant_id, run_id=s.run_id,
                request_id=str(esc.get("request_id") or ""), tool=e.tool or "", args=None,
                kind="escalation", question=e.reason,
            )
        elif isinstance(e, ev.ApprovalRequested):
            notice = ApprovalNotice(
                tenant_id=s.tenant_id, run_id=s.run_id, request_id=e.request_id, tool=e.tool,
                args=e.args, evidence=e.evidence, risks=tuple(e.risks),
                required_role=e.required_role, expires_at=e.expires_at, kind="approval",
            )
        else:
            notice = ApprovalNotice(
                tenant_id=s.tenant_id, run_id=s.run_id, request_id=str(e.request_id), tool="",
                args=None, evidence=e.context, required_role=e.required_role,
                expires_at=e.expires_at or 0.0, kind="question", question=e.question,
            )
        await self.guard.notifier.notify(notice)

    async def _take_decision(self, act: _Activation, payload: JSON, answer: bool) -> None:
        """Verify a submitted decision against the request the run waits on; journal the
        verified decision, or why it was refused (the run then keeps waiting)."""
        from .approvals import ApprovalCheck, SignedDecision, verify_decision

        s = act.state
        try:
            d = SignedDecision.model_validate(payload)
        except ValidationError:
            act.buffer(ev.ApprovalInvalid(request_id=None, approver_id=None,
                                          reason="malformed"))
            return
        if answer and s.status == "dead" and d.decision == "resolve":
            # A signed resume of a dead run names the dead-lettering it answers.
            pending: dict[str, JSON] | None = {"request_id": s.dead_request}
            check_tool, check_hash = "", ""
            if _resumption_of(d.answer) is None:
                act.buffer(ev.ApprovalInvalid(request_id=d.request_id,
                                              approver_id=d.approver_id,
                                              reason="malformed_resolution"))
                return
        elif answer:
            # An answer settles a question; a resolution settles any other escalation.
            esc = s.escalation or {}
            asks = esc.get("cause") == "question"
            pending = esc if s.status == "escalated" and asks == (d.decision != "resolve") \
                else None
            check_tool, check_hash = "", ""
            if d.decision == "resolve":
                check_tool = str(esc.get("tool") or "")
                call = next((c for c in s.calls if c.key and c.key == esc.get("key")), None)
                check_hash = call.args_hash if call is not None else ""
                if _resolution_of(d.answer) is None:
                    act.buffer(ev.ApprovalInvalid(request_id=d.request_id,
                                                  approver_id=d.approver_id,
                                                  reason="malformed_resolution"))
                    return
        else:
            pending = s.pending_approval if s.status == "waiting" else None
            check_tool = str((pending or {}).get("tool", ""))
            check_hash = str((pending or {}).get("args_hash", ""))
        if pending is None or pending.get("request_id") != d.request_id:
            act.buffer(ev.ApprovalInvalid(
                request_id=d.request_id, approver_id=d.approver_id,
                reason="not_pending",
            ))
            return
        expires = pending.get("expires_at")
        check = ApprovalCheck(
            request_id=d.request_id, run_id=s.run_id, tenant_id=s.tenant_id, tool=check_tool,
            args_hash=check_hash, required_role=pending.get("required_role"),
            expires_at=float(expires) if expires is not None else float("inf"),
        )
        now = self.clock.now()
        approver = await self.io(self.store.get_approver, s.tenant_id, d.approver_id)
        reason = verify_decision(d, check=check, approver=approver, now=now)
        if reason is None and (d.decision in ("answer", "resolve")) != answer:
            reason = "wrong_decision_kind"
        if reason is None and not await self.io(functools.partial(
            self.store.use_nonce, s.tenant_id, d.nonce, run_id=s.run_id,
            request_id=d.request_id, at=now,
        )):
            reason = "replayed_nonce"
        if reason is not None:
            act.buffer(ev.ApprovalInvalid(request_id=d.request_id, approver_id=d.approver_id,
                                          reason=reason))
            return
        signed = d.model_dump(mode="json")
        resolution = _resolution_of(d.answer) if d.decision == "resolve" else None
        if s.status == "dead":
            step = _resumption_of(d.answer)
            act.buffer(ev.RunResumed(by=d.approver_id, step=step or None, decision=signed))
        elif resolution is not None:
            act.buffer(ev.EscalationResolved(
                key=pending.get("key"), resolution=resolution[0], result=resolution[1],
                by=d.approver_id, decision=signed,
            ))
        elif answer:
            act.buffer(ev.EscalationAnswered(request_id=d.request_id, approver_id=d.approver_id,
                                             answer=d.answer, decision=signed))
        elif d.decision == "approve":
            act.buffer(ev.ApprovalGranted(
                request_id=d.request_id, approver_id=d.approver_id, decision=signed,
                required_role=check.required_role, expires_at=check.expires_at,
            ))
        else:
            act.buffer(ev.ApprovalRejected(request_id=d.request_id, approver_id=d.approver_id,
                                           decision=signed))

    def _deadline_passed(self, s: RunState) -> bool:
        return (
            s.deadline is not None and not s.deadline_escalated and not s.final
            and s.status not in ("escalated", "dead") and self.clock.now() >= s.deadline
        )

    async def _renew_if_due(self, act: _Activation) -> None:
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

    async def _leave(self, act: _Activation, *, idle: bool = False) -> None:
        """Hand the run back: with the last commit when there is one, else on its own.

        ``idle``: the journal says the run is not due (waiting, escalated, dead or
        finished). A row that says it is due anyway — edited, or left behind by a bug —
        is not due again before the journal's own wake time (or a back-off when it has
        none), so the run is never claimed in a loop for nothing.
        """
        if act.pending:
            await act.commit(release=True)
            return
        retry_at = None
        if idle:
            now = self.clock.now()
            wake = _run_update(act.state, now, act.due_at).next_wake_at
            retry_at = wake if wake is not None and wake > now else now + IDLE_CLAIM_BACKOFF
        await self.io(functools.partial(self.store.release, act.lease, retry_at=retry_at))

    async def _read_inbox(self, act: _Activation) -> None:
        s = act.state
        for sig in await self.io(self.store.pending_signals, s.tenant_id, s.run_id):
            payload = json.loads(sig.payload)
            if s.final:
                break
            if sig.name == CANCEL:
                act.consumed.append(sig.signal_id)
                act.buffer(ev.RunCancelled(by=str(payload.get("by", "unknown")),
                                           reason=str(payload.get("reason", ""))))
            elif sig.name == RESOLVE:
                act.consumed.append(sig.signal_id)
                if s.status == "escalated" and self.guard.signed_resolutions:
                    act.buffer(ev.SignalIgnored(
                        signal=sig.name, signal_id=sig.signal_id,
                        reason="unsigned resolution refused: this worker requires a "
                               "resolution signed by an approver (underway approvals resolve)",
                    ))
                elif s.status == "escalated":
                    esc = s.escalation or {}
                    act.buffer(ev.EscalationResolved(
                        key=esc.get("key"), resolution=payload["resolution"],
                        result=payload.get("result"), by=str(payload.get("by", "unknown")),
                    ))
                else:
                    # Journaled so the signal is consumed: a stale resolve must never
                    # settle a later escalation.
                    act.buffer(ev.SignalIgnored(
                        signal=sig.name, signal_id=sig.signal_id,
                        reason=f"run was {s.status}, not escalated",
                    ))
            elif sig.name == RESUME:
                act.consumed.append(sig.signal_id)
                if s.status == "dead" and self.guard.signed_resolutions:
                    act.buffer(ev.SignalIgnored(
                        signal=sig.name, signal_id=sig.signal_id,
                        reason="unsigned resume refused: this worker requires a resume "
                               "signed by an approver (underway approvals resolve "
                               "--resolution resume)",
                    ))
                elif s.status == "dead":
                    act.buffer(ev.RunResumed(by=str(payload.get("by", "unknown")),
                                             step=payload.get("step")))
                else:
                    act.buffer(ev.SignalIgnored(
                        signal=sig.name, signal_id=sig.signal_id,
                        reason=f"run was {s.status}, not dead",
                    ))
            elif sig.name in (APPROVAL_SIGNAL, ANSWER_SIGNAL):
                act.consumed.append(sig.signal_id)
                await self._take_decision(act, payload, sig.name == ANSWER_SIGNAL)
            elif s.waiting_signal == sig.name and s.status == "waiting":
                act.consumed.append(sig.signal_id)
                act.buffer(ev.SignalReceived(signal=sig.name, signal_id=sig.signal_id,
                                             payload=payload, sender=sig.sender))
        act.control_pending = False

    async def _run_step(self, act: _Activation, flow: Flow[Any, Any]) -> None:
        s = act.state
        step = str(s.step)
        act.buffer(ev.StepStarted(step=step, attempt=s.attempt + 1))
        x = StepExecution(act, step)
        try:
            ctx: RunContext[Any, Any] = RunContext(
                x, flow.state_type.model_validate(s.state), flow.input_type.model_validate(s.input)
            )
            faults.point("step.before_run")
            nxt = await flow.get_step(step)(ctx)
            if x.broken is not None:
                raise x.broken
            if act.store_error is not None:
                # Step code swallowed a database failure: its view of the run is unsure.
                raise act.store_error
            self._finish_step(act, flow, step, ctx, nxt)
        except _Suspend:
            pass
        except _DeadLetter as dead:
            act.buffer(ev.RunDeadLettered(
                reason=dead.reason, error_type=dead.error_type, step=step
            ))
        except _Escalate as esc:
            self._escalate(act, esc.event)
        except _Stop as stop:
            act.buffer(stop.event)
        except NonDeterminismError as exc:
            self._escalate(act, ev.Escalated(reason=str(exc), index=exc.index))
        except RunCancelledSignal:
            act.buffer(ev.RunCancelled(by="step", reason="cancelled from inside the step"))
        except Exception as exc:
            if act.store_error is not None:
                raise act.store_error from None
            if _is_store_failure(exc):
                raise
            # Not a business outcome (that is ctx.fail): the run stops for an operator, who
            # may fix the cause and resume it, or cancel it.
            act.buffer(ev.RunDeadLettered(reason=f"{type(exc).__name__}: {exc}",
                                          error_type=type(exc).__name__, step=step))

    async def _heartbeat(self, act: _Activation, step_task: asyncio.Task[Any] | None) -> None:
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

    def _finish_step(self, act: _Activation, flow: Flow[Any, Any], step: str,
                     ctx: RunContext[Any, Any], nxt: Next) -> None:
        if not isinstance(nxt, Goto | Sleep | Wait | Done | Fail):
            raise ConfigurationError(
                f"step {step!r} of flow {flow.name!r} returned {nxt!r}; return ctx.goto(), "
                "ctx.sleep(), ctx.wait(), ctx.done() or ctx.fail()"
            )
        then = nxt.then if isinstance(nxt, Sleep | Wait) else (
            nxt.step if isinstance(nxt, Goto) else None)
        if then is not None:
            flow.get_step(then)
        if isinstance(nxt, Done):
            try:
                canonical_json(nxt.result)
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(
                    f"step {step!r} of flow {flow.name!r} finished with a result that is not "
                    f"JSON ({exc}); return plain JSON values (e.g. an ISO string for a time)"
                ) from None
        patch = make_patch(act.state.state, ctx.state.model_dump(mode="json"))
        act.buffer(ev.StepCompleted(step=step, next=then, patch=patch))
        now = self.clock.now()
        match nxt:
            case Sleep():
                act.buffer(ev.TimerSet(timer_id=f"timer-{act.state.seq}",
                                       wake_at=now + nxt.seconds))
            case Wait():
                timer = f"timer-{act.state.seq + 1}" if nxt.timeout is not None else None
                act.buffer(ev.SignalAwaited(signal=nxt.signal, timer_id=timer))
                if nxt.timeout is not None:
                    act.buffer(ev.TimerSet(timer_id=str(timer), wake_at=now + nxt.timeout))
            case Done():
                act.buffer(ev.RunCompleted(result=nxt.result))
            case Fail():
                act.buffer(ev.RunFailed(reason=nxt.reason, step=step))
            case Goto():
                pass

    def _flow(self, name: str) -> Flow[Any, Any]:
        try:
            return self.flows[name]
        except KeyError:
            raise ConfigurationError(
                f"flow {name!r} is not registered with this engine; known: {sorted(self.flows)}"
            ) from None


_LOST_TRACK = frozenset({"ToolTimedOut", "OutcomeUnknown"})
"""Error types of a mutating call whose outcome is unknown (not a failure)."""


def _lost_track(exc: BaseException) -> bool:
    """True when ``exc`` means the request may have reached the outside world and its
    answer was lost: :class:`~underway.errors.OutcomeUnknown`, a connection reset or broken
    pipe, or an HTTP client's read/write error or read timeout (httpx)."""
    if getattr(exc, "outcome_unknown", False):
        return True
    if isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return True
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.ReadError | httpx.WriteError
                                        | httpx.ReadTimeout | httpx.WriteTimeout
                                        | httpx.RemoteProtocolError):
        return True
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and _lost_track(cause)


def _iso(t: float | None) -> str:
    return "never" if t is None else datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _resolution_of(answer: JSON) -> tuple[Literal["succeeded", "failed", "retry"], JSON] | None:
    """The (resolution, result) a signed ``resolve`` decision carries; None when malformed."""
    if not isinstance(answer, dict) or set(answer) - {"resolution", "result"}:
        return None
    resolution = answer.get("resolution")
    if resolution == "succeeded":
        return "succeeded", answer.get("result")
    if resolution in ("failed", "retry"):
        return ("failed" if resolution == "failed" else "retry"), None
    return None


def _resumption_of(answer: JSON) -> str | None:
    """The step a signed resume names: ``""`` for where the run stopped; None when the
    answer is no resume."""
    if not isinstance(answer, dict) or answer.get("resolution") != "resume":
        return None
    if set(answer) - {"resolution", "step"}:
        return None
    step = answer.get("step")
    if step is None:
        return ""
    return step if isinstance(step, str) and step else None


def _allowed_name(name: str) -> str:
    """The name an allow-list must hold for a call of ``name``: undoing an allowed tool
    (``<tool>.compensate``) is allowed with the tool."""
    return name.removesuffix(COMPENSATE_SUFFIX)
