"""Step execution and the call path: what a :class:`~underway.flow.RunContext` does —
memoized tool and model calls through the one door (the whole guard, the circuit, the
journaled intent, the call), questions, and journaled values."""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from typing import Any, Literal, NoReturn

from pydantic import ValidationError

from .. import events as ev
from .. import faults
from ..codec import blob_where
from ..effects import (
    CallInfo,
    Tool,
    args_hash,
    fence_of,
    idempotency_key,
)
from ..egress import Egress
from ..errors import (
    ConfigurationError,
    NonDeterminismError,
    ToolCallError,
    ValueTooLarge,
    is_store_failure,
)
from ..events import JSON, canonical_json
from ..guard.approvals.check import check_approval
from ..guard.intent import CallIntent
from ..guard.policy import declares_approval
from ..hooks import HookFailed
from ..journal.state import REFUSAL_ERRORS, request_id_for, shadow_result
from ..redaction import schema_failure, scrub
from ..secrets import credentials_rejected, mask
from ..secrets import refusal as secret_refusal
from . import _budgets as budgets
from . import _outcomes as outcomes
from ._activation import Activation
from ._model_calls import ModelCalls
from ._notices import notify
from ._outcomes import LOST_TRACK, allowed_name, ask_reconcile, credentials_retry, lost_track
from ._outcomes import hook_failed as _hook_failed
from ._stops import DeadLetter, Escalate, Suspend, unswallowed

log = logging.getLogger("underway.engine")

_ALWAYS_JSON = frozenset({type(None), bool, int})
"""Result types that always encode: a result of one is not encoded to be checked."""


class StepExecution(ModelCalls):
    """The engine side of a :class:`RunContext`: memoized calls and journaled values."""

    def __init__(self, act: Activation, step: str) -> None:
        self._act = act
        s = act.state
        self.run_id, self.tenant_id, self.step = s.run_id, s.tenant_id, step
        self.attempt = s.attempt
        self.idempotency_key = s.idempotency_key
        # A loop revisits a step: keys must differ per visit, yet not per attempt.
        self.ordinal = s.steps_completed
        self.signal = s.signal
        self.timed_out = s.timed_out
        self.clock = act.services.clock.now
        self._calls = 0
        self._values = 0
        self.broken: BaseException | None = None
        """The first stop raised through this step (see :func:`._stops.unswallowed`)."""
        self._decision: str | None = None
        self._held = False
        """Whether this attempt of the current call holds a reservation on the tenant's
        budget."""

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

    @unswallowed
    async def call(
        self, tool: Tool | str, args: JSON, *, labels: frozenset[str] = frozenset(),
        evidence: JSON = None, risks: list[str] | None = None, typed: bool = False,
        summary: str | None = None,
    ) -> Any:
        """Call ``tool``: its journaled result if the call completed before, else through
        the door. With ``typed``, the result as the tool's result model, validated from
        the JSON the journal holds (on the first run and on every replay alike)."""
        t = self._act.services.registry.tool(tool)
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
        metrics = self._act.services.metrics
        if t.traced and metrics.enabled:
            metrics.calling(self.tenant_id, self.run_id, key, t, args)
        result = await self._result(t, args, key, index, h, rec, labels, evidence, risks, summary)
        if not typed or result == shadow_result(t.name):
            # Shadow mode's placeholder stands in for a result the tool never produced.
            return result
        return t.parse_result(result, key=key)

    async def _result(
        self, t: Tool, args: JSON, key: str, index: int, h: str, rec: Any,
        labels: frozenset[str], evidence: JSON, risks: list[str] | None, summary: str | None,
    ) -> JSON:
        """The JSON result of call ``index``: journaled, reconciled, or from the door."""
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
            raise Escalate(f"call {key} of {t.name!r} awaits an approval but the run went on; "
                            "resolve with retry to ask again", key, t.name, index)
        # The call's facts, computed once for this attempt: everything below judges,
        # counts and runs this one value. A later attempt computes its own.
        call = CallIntent.of(t, args, key=key, index=index, h=h, labels=labels,
                             evidence=evidence, risks=tuple(risks or ()),
                             summary=summary)
        if rec is not None and rec.status == "started":
            # Unknown outcome: the intent is journaled, the outcome is not.
            settled = await self._settle_unknown(call)
            if settled is not None:
                return settled[0]
        return await self._door(call, rec)

    async def _door(self, call: CallIntent, rec: Any) -> JSON:
        """The one door every execution of a tool passes through — a first attempt, a
        retry after an error or a back-off, after a resolution or a resume, a re-run after
        a crash or after ``reconcile`` said the effect did not happen: the whole guard at
        this moment (allow-list, schema, budgets, policy, an approval verified now), then
        the circuit, the journaled intent, and the call."""
        self._held = False
        try:
            return await self._through(call, rec)
        finally:
            if self._held:
                budgets.settle_hold(self._act, call)

    async def _through(self, call: CallIntent, rec: Any) -> JSON:
        t, key, index, h = call.tool, call.key, call.index, call.args_hash
        maybe_happened = rec is not None and rec.maybe_happened
        try:
            shadowed = await self._guard(call, rec)
        except ToolCallError as exc:
            if maybe_happened:
                self._unknown(t, key, index, f"and trying it again was refused: {exc.message}")
            raise
        except Exception as exc:
            if is_store_failure(exc):
                # The database's failure, not the run's: hand the run back, try later.
                self._act.store_error = exc
                raise
            # Whatever the guard cannot interpret is a refusal, never a pass.
            self._refuse(t, key, index, h, "guard_error",
                         f"the guard could not decide on this call: {type(exc).__name__}: {exc}")
        if shadowed:
            return shadow_result(t.name)
        if t.circuit is not None:
            await self._admit(t, key, index, h)
        # A re-run after a crash reuses the intent already journaled (same key, same args).
        if t.mutating and (rec is None or rec.status != "started"):
            self._act.buffer(ev.ToolStarted(
                key=key, tool=t.name, index=index, args=call.args, args_hash=h,
                sandbox_profile=t.sandbox.digest() if t.sandbox is not None else None,
                policy_decision=self._decision, **t.declared_hidden,
            ))
            await self._act.commit()
        try:
            result = await self._execute(call)
        except ToolCallError as exc:
            await self._settle_circuit(t, exc.error_type)
            if t.mutating and exc.error_type in LOST_TRACK:
                return await self._timed_out(call, exc)
            if exc.credentials_rejected and t.secrets:
                await credentials_retry(self._act, t, key, index, exc)
            self._retry_or_raise(t, key, index, exc)
            raise
        if t.circuit is not None:
            await self._settle_circuit(t, None)
        return result

    async def _settle_unknown(self, call: CallIntent) -> tuple[JSON] | None:
        """Settle a call whose intent is journaled and whose outcome is not: ``(result,)``
        when ``reconcile`` found it happened; None when it must run again through the door
        (an idempotent tool with the same key, or ``reconcile`` found it did not happen);
        otherwise the run escalates to a person."""
        t, key, index, h = call.tool, call.key, call.index, call.args_hash
        if t.idempotent:
            return None
        if t.reconcile is None:
            self._unknown(t, key, index, "and it has no reconcile hook; confirm whether it "
                                         "happened")
        found = await ask_reconcile(self._act, call, self.step)
        if found.outcome == "happened":
            self._act.buffer(ev.ToolSucceeded(
                key=key, tool=t.name, index=index, args_hash=h, result=found.result,
                reconciled=True, counts=call.counts, **t.declared_hidden,
            ))
            return (found.result,)
        if found.outcome == "unknown":
            self._unknown(t, key, index, "and its reconcile hook could not tell whether it "
                                         "took effect")
        self._act.buffer(ev.ToolReconciled(key=key, tool=t.name, index=index, args_hash=h))
        return None

    async def _timed_out(self, call: CallIntent, exc: ToolCallError) -> JSON:
        """A mutating call timed out or lost its connection: it may have happened. An
        idempotent tool is tried again with the same key on its retry policy (durable
        timer); ``reconcile`` is asked; else — or once retries are spent — a person
        decides. Never retried blindly, never recorded as not having happened."""
        t, key, index = call.tool, call.key, call.index
        if t.idempotent:
            self._retry_or_raise(t, key, index, exc)
            self._unknown(t, key, index, f"after {exc.error_type}: {exc.message}")
        settled = await self._settle_unknown(call)
        if settled is not None:
            return settled[0]
        # reconcile says it did not happen: now it is an ordinary failure.
        self._retry_or_raise(t, key, index, exc)
        raise exc

    def _unknown(self, t: Tool, key: str, index: int, why: str) -> NoReturn:
        raise Escalate(
            f"outcome of tool {t.name!r} (key {key}) is unknown {why}",
            key, t.name, index, cause="unknown_outcome",
        )

    def _refuse(self, t: Tool, key: str, index: int, h: str, cause: str, reason: str) -> NoReturn:
        self._act.buffer(ev.ToolRefused(
            key=key, tool=t.name, index=index, args_hash=h, cause=cause,
            reason=reason,
        ))
        raise ToolCallError(t.name, REFUSAL_ERRORS[cause], reason, retryable=False)

    async def _guard(self, call: CallIntent, rec: Any) -> bool:
        """Allow-list, schema, money, budgets, policy, approval and shadow mode, in that
        order; True when the call is shadowed (journaled, not executed)."""
        t, args, key, index, h = call.tool, call.args, call.key, call.index, call.args_hash
        act, svc = self._act, self._act.services
        s, flow, guard = act.state, svc.flow(act.state.flow), svc.guard
        self._decision = None
        if flow.allowed_tools is not None and allowed_name(t.name) not in flow.allowed_tools:
            self._refuse(t, key, index, h, "not_allowed",
                         f"tool {t.name!r} is not on the allow-list of flow {flow.name!r}")
        refused = secret_refusal(guard.secrets, t.secrets)
        if refused is not None:
            self._refuse(t, key, index, h, "secret_refused", str(refused))
        if call.schema_error is not None:
            self._schema_failed(t, key, index, "args", call.schema_error)
        if call.refusal is not None:
            self._refuse(t, key, index, h, "policy_denied", call.refusal)
        now = svc.clock.now()
        if guard.has_budget(flow) and (usage := call.usage) is not None:
            await budgets.settled_first(act)
            over = await guard.over_budget(flow, svc.store, s, key, usage, now,
                                           in_flight=budgets.in_flight(act))
            if over is not None:
                budgets.over_budget(self._act, self.step, over[0], over[1], t.name)
            budgets.admitted(act, key, index, usage)
            self._held = guard.budget_of_tenant(s.tenant_id) is not None
        policy = guard.policy_for(flow)
        # A run whose lineage is in shadow mode stays in it, whatever its flow says.
        shadow = t.mutating and (guard.shadow_for(flow) or s.lineage.shadow)
        if policy is None and not declares_approval(call.labels):
            # No policy: nothing to decide or journal; the call goes ahead (or is shadowed).
            if shadow:
                act.buffer(ev.ToolShadowed(
                    key=key, tool=t.name, index=index, args=args, args_hash=h, decision="allow",
                    **t.declared_hidden,
                ))
            return shadow
        d = await guard.decide(flow, svc.store, s, call, now)
        act.buffer(ev.PolicyDecided(
            key=key, tool=t.name, index=index, args_hash=h, decision=d.outcome,
            rule_id=d.rule_id, policy_version=d.policy_version, reason=d.reason,
            policy_digest=None if policy is None else policy.digest,
            environment=guard.environment,
        ))
        if d.outcome == "deny":
            self._refuse(t, key, index, h, "policy_denied",
                         d.reason or f"denied by policy rule {d.rule_id}")
        if d.outcome == "require_approval" and not shadow and key in s.approvals:
            # Approved before: the approval must still hold for exactly this call, now.
            reason = await check_approval(svc.store, s, key, t.name, h, now=svc.clock.now())
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
                args=args, args_hash=h, evidence=call.evidence, risks=list(call.risks),
                required_role=d.approver_role, expires_at=now + ttl, rule_id=d.rule_id,
                policy_version=d.policy_version, **call.for_approver(), **t.declared_hidden,
            )
            act.buffer(request)
            if guard.notifier is not None:
                act.after_commit.append(functools.partial(notify, svc, s, request))
            raise Suspend
        self._decision = d.outcome if d.rule_id is not None else None
        if shadow:
            act.buffer(ev.ToolShadowed(
                key=key, tool=t.name, index=index, args=args, args_hash=h, decision=d.outcome,
                **t.declared_hidden,
            ))
            return True
        return False

    @unswallowed
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
        svc = self._act.services
        event = ev.Escalated(
            reason=f"question: {question}", key=key, tool="ask", index=index,
            cause="question", request_id=request_id_for(key), question=question,
            context=context, required_role=role,
            expires_at=None if expires_in is None else svc.clock.now() + expires_in,
        )
        if svc.guard.notifier is not None:
            self._act.after_commit.append(functools.partial(notify, svc, self._act.state, event))
        raise Escalate.about(event)

    async def _admit(self, t: Tool, key: str, index: int, h: str) -> None:
        """Fail fast, journaled as ``CircuitOpen``, when the tool's circuit is open."""
        if t.circuit is None:
            return
        svc = self._act.services
        verdict = await self._act.store(functools.partial(
            svc.store.circuit_admit, t.circuit.scope(self.tenant_id), t.name,
            now=svc.clock.now(), cooldown=t.circuit.cooldown,
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
        svc = self._act.services
        await self._act.store(functools.partial(
            svc.store.circuit_record, t.circuit.scope(self.tenant_id), t.name,
            ok=error_type is None, now=svc.clock.now(),
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
        s, svc = self._act.state, self._act.services
        rec = s.call(index)
        attempts = rec.attempts if rec is not None else 1
        if attempts >= policy.max_attempts:
            return
        if svc.retry_budget is not None and s.retries >= svc.retry_budget:
            raise DeadLetter(
                f"retry budget of {svc.retry_budget} retries per run is exhausted; last: "
                f"{t.name} failed with {exc.error_type}: {exc.message}",
                "RetryBudgetExhausted",
            )
        delay = policy.delay(attempts + 1, random.random(), hint=exc.retry_after)
        timer = f"retry-{s.seq + 1}"
        self._act.buffer(ev.RetryScheduled(
            key=key, tool=t.name, index=index, attempt=attempts + 1, timer_id=timer,
            delay_s=delay,
        ))
        self._act.buffer(ev.TimerSet(timer_id=timer, wake_at=svc.clock.now() + delay))
        raise Suspend

    async def _execute(self, call: CallIntent) -> JSON:
        t, key, index, h = call.tool, call.key, call.index, call.args_hash
        s = self._act.state
        secrets = await outcomes.fetch_secrets(self._act, call) if t.secrets else {}
        egress = None if t.hosts is None else Egress(t.name, t.hosts)
        info = CallInfo(key, self.tenant_id, self.run_id, self.step, index,
                        fence_of(self._act.lease.token, s.seq), s.principal,
                        tuple(s.roles), secrets, egress)
        faults.point("effect.before_run")
        began = time.perf_counter()
        try:
            result = await t.invoke(call.args, info, validated=call.validated)
        except HookFailed as failed:
            # An undo that did not answer: whether it took effect is for a person to say.
            _hook_failed(t, key, index, failed)
        except TimeoutError:
            self._act.buffer(ev.ToolTimedOut(
                key=key, tool=t.name, index=index, args_hash=h, timeout_s=t.timeout
            ))
            raise ToolCallError(
                t.name, "ToolTimedOut", f"timed out after {t.timeout}s", retryable=True
            ) from None
        except Exception as exc:
            self._egress_refused(call, egress)
            if t.mutating and lost_track(exc):
                message = scrub(mask(str(exc), secrets), t.hidden, call.args) \
                    or type(exc).__name__
                self._act.buffer(ev.ToolOutcomeUnknown(
                    key=key, tool=t.name, index=index, args_hash=h,
                    error_type=type(exc).__name__, message=message,
                ))
                raise ToolCallError(t.name, "OutcomeUnknown", message, retryable=True) from None
            # With a retry policy a failure is retryable unless the error says otherwise.
            retryable = bool(getattr(exc, "retryable", t.retry is not None))
            message = scrub(mask(str(exc), secrets), t.hidden, call.args)
            self._act.buffer(ev.ToolFailed(
                key=key, tool=t.name, index=index, args_hash=h, error_type=type(exc).__name__,
                message=message, retryable=retryable,
                latency_ms=(time.perf_counter() - began) * 1000,
            ))
            raise ToolCallError(
                t.name, type(exc).__name__, message, retryable=retryable,
                retry_after=getattr(exc, "retry_after", None),
                credentials_rejected=credentials_rejected(exc),
            ) from (None if secrets else exc)
        self._egress_refused(call, egress)
        faults.point("effect.after_run")
        latency = (time.perf_counter() - began) * 1000
        codec = self._act.services.journal.codec
        what = f"the result of tool {t.name!r} (call {key})"
        try:
            if t.result_model is not None:
                result = t.result_model.model_validate(result).model_dump(mode="json")
            if type(result) is str and len(result) > max(codec.chunk_bytes, codec.threshold):
                # Measured and hashed a chunk at a time, off the event loop: the commit
                # finds its blob made.
                s = self._act.state
                await self._act.services.io(
                    codec.large_blob, result,
                    blob_where(s.tenant_id, "", s.run_id, s.subject), what)
            elif type(result) not in _ALWAYS_JSON:
                size = len(canonical_json(result))
                if size > codec.max_value_bytes:
                    raise ValueTooLarge(what, size, codec.max_value_bytes)
        except ValidationError as exc:
            self._schema_failed(t, key, index, "result", exc)
        except ValueTooLarge as exc:
            self._act.buffer(ev.ToolFailed(
                key=key, tool=t.name, index=index, args_hash=h, error_type="ValueTooLarge",
                message=str(exc), retryable=False, latency_ms=latency,
            ))
            raise ToolCallError(t.name, "ValueTooLarge", str(exc), retryable=False) from exc
        except (TypeError, ValueError) as exc:
            self._act.buffer(ev.SchemaValidationFailed(
                key=key, tool=t.name, index=index, where="result",
                errors=[{"msg": f"result is not JSON: {exc}"}], **t.declared_hidden,
            ))
            raise ToolCallError(
                t.name, "SchemaValidationFailed", f"result is not JSON: {exc}", retryable=False
            ) from exc
        self._act.buffer(ev.ToolSucceeded(
            key=key, tool=t.name, index=index, args_hash=h, result=result, latency_ms=latency,
            counts=call.counts, **t.declared_hidden,
        ))
        return result

    def _egress_refused(self, call: CallIntent, egress: Egress | None) -> None:
        """A call that tried to reach a host its tool did not declare is refused as a
        whole, journaled, even when the tool caught the error and went on."""
        if egress is not None and egress.refused:
            self._refuse(call.tool, call.key, call.index, call.args_hash, "egress_denied",
                         f"tool {call.tool.name!r} may reach only "
                         f"{', '.join(egress.hosts) or 'no host'}; refused "
                         f"{', '.join(egress.refused)}")

    def _schema_failed(
        self, t: Tool, key: str, index: int, where: Literal["args", "result"],
        exc: ValidationError,
    ) -> NoReturn:
        errors = json.loads(exc.json(include_url=False))
        self._act.buffer(ev.SchemaValidationFailed(
            key=key, tool=t.name, index=index, where=where, errors=errors,
            **t.declared_hidden,
        ))
        message = schema_failure(where, errors, t.hidden)
        raise ToolCallError(t.name, "SchemaValidationFailed", message,
                            retryable=False) from exc

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

