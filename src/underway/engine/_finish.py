"""A step's end, and a run's finish: the policy's say on its result.

A step's end is journaled by :func:`finish_step`: ``StepCompleted`` with the patch of the
state, then what the step returned asks for.


A result's taint is the run's when its step returns ``ctx.done``
(:func:`~underway.guard.taint.tainted_by`): the sources its lineage brought in, those its
flow reads from its state and those of the child outcomes it received
(``ctx.child_taint``; each step's end journals what it received,
``StepCompleted.child_taint``). It is journaled on :class:`~underway.events.RunCompleted`
(``tainted_by``), and the finish carries its labels to the policy. The marks the step
gave ``ctx.done`` (the parts of the result trusted sources do not account for) are
journaled beside it (``marks``); the finish carries them as evidence, with the label
:data:`ANSWER_REPEATS_UNTRUSTED` when a part repeats untrusted text.

A policy whose rules name :data:`~underway.guard.policy.FINISH` decides on the finish as on one
more call of the step, at the step's next call position: ``PolicyDecided`` is journaled,
``allow`` completes the run, ``deny`` fails it (the result is withheld), and
``require_approval`` holds the result (``ApprovalRequested``) until a signed decision
arrives. The step then runs again, its calls answered from the journal, and reaches the
same finish: an approval verified now completes the run with its result; a rejection or
an expiry fails it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, assert_never

from .. import events as ev
from ..effects import args_hash, idempotency_key
from ..errors import ConfigurationError
from ..events import canonical_json
from ..flow import Done, Fail, Flow, Goto, Next, RunContext, Sleep, Wait
from ..guard.approvals.check import check_approval
from ..guard.policy import FINISH
from ..guard.taint import taint_labels, tainted_by
from ..journal.patch import make_patch
from ..journal.state import RunState, request_id_for
from ._notices import notify
from ._stops import Escalate, Suspend

if TYPE_CHECKING:
    from ._activation import Activation
    from ._calls import StepExecution

ANSWER_REPEATS_UNTRUSTED = "answer-repeats-untrusted"
"""The finish's label when a part of the result repeats untrusted text (a mark with
``repeats``)."""


def result_taint(s: RunState, flow: Flow[Any, Any], ctx: RunContext[Any, Any]) -> list[str]:
    """Where the untrusted content that shaped the result of ``ctx``'s step came from
    (:func:`~underway.guard.taint.tainted_by`).

    Args:
        s: The run's state.
        flow: The run's flow.
        ctx: The step's context: its state, and the child outcomes the run received.
    """
    return tainted_by(s.lineage, flow, ctx.state, ctx.child_taint)


async def judge_finish(x: StepExecution, flow: Flow[Any, Any], done: Done,
                       sources: list[str]) -> Done | Fail:
    """What becomes of the step's ``done``: itself when the run may complete, a
    :class:`Fail` when the policy withholds the result. Raises :class:`Suspend` when the
    result is held for a person's approval."""
    act = x._act
    svc, s = act.services, act.state
    args = {"result": done.result, "tainted_by": sources}
    try:
        h = args_hash(FINISH, args)
    except (TypeError, ValueError):
        # Not JSON: the step's end says so, with or without a policy.
        return done
    now = svc.clock.now()
    repeated = [m for m in done.marks if m.get("repeats") is True]
    labels = frozenset(taint_labels(sources)) | (
        {ANSWER_REPEATS_UNTRUSTED} if repeated else frozenset())
    decided = await svc.guard.decide_finish(flow, svc.store, s, args, labels, now)
    if decided is None:
        return done
    policy, d = decided
    index = x._calls
    x._calls += 1
    rec = x._record(index, FINISH, h)
    key = rec.key if rec is not None and rec.key else idempotency_key(
        x.run_id, x.step, index, ordinal=x.ordinal)
    act.buffer(ev.PolicyDecided(
        key=key, tool=FINISH, index=index, args_hash=h, decision=d.outcome,
        rule_id=d.rule_id, policy_version=d.policy_version, reason=d.reason,
        policy_digest=policy.digest, environment=svc.guard.environment,
    ))
    if rec is not None and rec.status == "failed":
        return Fail(f"the result was not released: {rec.message or rec.error_type}")
    if d.outcome == "deny":
        return Fail(f"the result was withheld by policy rule {d.rule_id}: {d.reason}")
    if d.outcome == "allow":
        return done
    if rec is not None and rec.status == "approved" and key in s.approvals:
        if rec.args_hash != h:
            return Fail("the result differs from the one the approval was requested for")
        reason = await check_approval(svc.store, s, key, FINISH, h, now=svc.clock.now())
        if reason is not None:
            return Fail(f"the approval of the result no longer holds: {reason}")
        return done
    if rec is not None and rec.status == "awaiting":
        raise Escalate(f"the result of run {x.run_id} awaits an approval but the run went on; "
                       "resolve with retry to ask again", key, FINISH, index)
    ttl = d.expires_in if d.expires_in is not None else svc.guard.approval_ttl
    asked = rec.approval_requests if rec is not None and rec.key == key else 0
    risks = [f"the result was shaped by untrusted content from {', '.join(sources)}"] \
        if sources else []
    risks += [_repeats_risk(m) for m in repeated]
    evidence: dict[str, Any] = {"tainted_by": sources}
    if done.marks:
        evidence["marks"] = [dict(m) for m in done.marks]
    request = ev.ApprovalRequested(
        request_id=request_id_for(key, asked + 1), key=key, tool=FINISH, index=index,
        args=args, args_hash=h, evidence=evidence, risks=risks,
        required_role=d.approver_role, expires_at=now + ttl, rule_id=d.rule_id,
        policy_version=d.policy_version, summary=f"Release the result of run {x.run_id}",
    )
    act.buffer(request)
    if svc.guard.notifier is not None:
        act.after_commit.append(functools.partial(notify, svc, s, request))
    raise Suspend


def _repeats_risk(mark: dict[str, Any]) -> str:
    sources = mark.get("sources")
    named = ", ".join(map(str, sources)) if isinstance(sources, list) and sources else "?"
    return f"{mark.get('path')} repeats untrusted text from {named}"


_ANSWERS = (Goto, Sleep, Wait, Done, Fail)
"""What a step may return."""


def finish_step(act: Activation, flow: Flow[Any, Any], step: str, ctx: RunContext[Any, Any],
                nxt: Next) -> None:
    """Journal the end of ``step``: ``StepCompleted`` with the state's patch, and what
    ``nxt`` asks for (a timer, a wait, the run's end).

    Args:
        act: The activation the step ran in.
        flow: The run's flow.
        step: The step that returned.
        ctx: The step's context, whose state it changed.
        nxt: What the step returned.

    Raises:
        ConfigurationError: The step returned something other than ``ctx``'s answers, went
            to an unknown step, or finished with a result that is not JSON.
    """
    if not isinstance(nxt, _ANSWERS):
        raise ConfigurationError(
            f"step {step!r} of flow {flow.name!r} returned {nxt!r}; return ctx.goto(), "
            "ctx.sleep(), ctx.wait(), ctx.done() or ctx.fail()"
        )
    then = nxt.step if isinstance(nxt, Goto) else (
        nxt.then if isinstance(nxt, Sleep | Wait) else None)
    if then is not None:
        flow.get_step(then)
        then = flow.resolve_step(then)
    if isinstance(nxt, Done):
        try:
            canonical_json(nxt.result)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(
                f"step {step!r} of flow {flow.name!r} finished with a result that is not "
                f"JSON ({exc}); return plain JSON values (e.g. an ISO string for a time)"
            ) from None
    patch = make_patch(act.state.state, ctx.state.model_dump(mode="json"))
    taint = ctx.child_taint
    received = [src for src in taint if src not in act.state.child_taint] if taint else []
    act.buffer(ev.StepCompleted(step=step, next=then, patch=patch, child_taint=received))
    now = act.services.clock.now()
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
            act.buffer(ev.RunCompleted(result=nxt.result,
                                       tainted_by=result_taint(act.state, flow, ctx),
                                       marks=[dict(m) for m in nxt.marks]))
        case Fail():
            act.buffer(ev.RunFailed(reason=nxt.reason, step=step))
        case Goto():
            pass
        case _:
            assert_never(nxt)
