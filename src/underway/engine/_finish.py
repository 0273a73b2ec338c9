"""A run's finish: the policy's say on its result.

A result's taint is the run's when its step returns ``ctx.done``
(:func:`~underway.guard.taint.tainted_by`): the sources its lineage brought in and those
its flow reads from its state. It is journaled on :class:`~underway.events.RunCompleted`
(``tainted_by``), and the finish carries its labels to the policy.

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
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..effects import args_hash, idempotency_key
from ..flow import Done, Fail, Flow
from ..guard.policy import FINISH
from ..guard.taint import taint_labels
from ..journal.state import request_id_for
from ._stops import Escalate, Suspend

if TYPE_CHECKING:
    from ._calls import StepExecution

async def judge_finish(x: StepExecution, flow: Flow[Any, Any], done: Done,
                       sources: list[str]) -> Done | Fail:
    """What becomes of the step's ``done``: itself when the run may complete, a
    :class:`Fail` when the policy withholds the result. Raises :class:`Suspend` when the
    result is held for a person's approval."""
    act = x._act
    eng, s = act.engine, act.state
    args = {"result": done.result, "tainted_by": sources}
    try:
        h = args_hash(FINISH, args)
    except (TypeError, ValueError):
        # Not JSON: the step's end says so, with or without a policy.
        return done
    now = eng.clock.now()
    labels = frozenset(taint_labels(sources))
    decided = await eng.guard.decide_finish(flow, eng.store, s, args, labels, now)
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
        policy_digest=policy.digest,
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
        reason = await eng.verify_approval(s, key, FINISH, h)
        if reason is not None:
            return Fail(f"the approval of the result no longer holds: {reason}")
        return done
    if rec is not None and rec.status == "awaiting":
        raise Escalate(f"the result of run {x.run_id} awaits an approval but the run went on; "
                       "resolve with retry to ask again", key, FINISH, index)
    ttl = d.expires_in if d.expires_in is not None else eng.guard.approval_ttl
    asked = rec.approval_requests if rec is not None and rec.key == key else 0
    risks = [f"the result was shaped by untrusted content from {', '.join(sources)}"] \
        if sources else []
    request = ev.ApprovalRequested(
        request_id=request_id_for(key, asked + 1), key=key, tool=FINISH, index=index,
        args=args, args_hash=h, evidence={"tainted_by": sources}, risks=risks,
        required_role=d.approver_role, expires_at=now + ttl, rule_id=d.rule_id,
        policy_version=d.policy_version,
    )
    act.buffer(request)
    if eng.guard.notifier is not None:
        act.after_commit.append(functools.partial(eng.notify, s, request))
    raise Suspend
