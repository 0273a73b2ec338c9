"""Telling people a run waits for them: an approval request, a question or an escalation
to resolve, as an :class:`~underway.guard.approvals.notify.ApprovalNotice` sent once the
request is durable."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .. import events as ev
from ..guard.approvals.notify import ApprovalNotice
from ..hooks import notify as send
from ..journal.state import RunState

if TYPE_CHECKING:
    from ._activation import Activation
    from ._services import StepServices


async def notify(svc: StepServices, s: RunState, e: ev.ApprovalRequested | ev.Escalated) -> None:
    """Tell people run ``s`` waits for them, with every field a run hides redacted.

    Call it once the request ``e`` is durable. A notifier's failures are its own: they
    are logged, and the run waits in the inbox all the same.

    Args:
        svc: The engine's guard (its notifier), redactor and notifier timeout.
        s: The run's state.
        e: The approval request, question or escalation.
    """
    notifier = svc.guard.notifier
    if notifier is None:
        return
    # A notice leaves for mailboxes and chat rooms: no field a run hides goes with it
    # (the request's page shows the exact arguments to whoever may see them).
    svc.redactor.learn(e)
    await send(notifier, svc.redactor.fields(notice_of(s, e), "args", "evidence", "question"),
               s.run_id, timeout=svc.notify_timeout)


def escalate(act: Activation, event: ev.Escalated) -> None:
    """Journal an escalation, and tell approvers once it is durable. A question's notice
    is sent by ``ctx.ask``, which knows more about it."""
    act.buffer(event)
    if act.services.guard.notifier is not None and event.cause != "question":
        act.after_commit.append(functools.partial(_escalated, act, event))


async def _escalated(act: Activation, event: ev.Escalated) -> None:
    # The state when the commit is done: the escalation it holds names the request.
    await notify(act.services, act.state, event)


def notice_of(s: RunState, e: ev.ApprovalRequested | ev.Escalated) -> ApprovalNotice:
    """The notice of ``e`` in run ``s``, before redaction."""
    if isinstance(e, ev.Escalated) and e.cause != "question":
        return ApprovalNotice(
            tenant_id=s.tenant_id, run_id=s.run_id,
            request_id=(s.escalation.request_id if s.escalation else None) or "",
            tool=e.tool or "", args=None,
            kind="escalation", question=e.reason,
        )
    if isinstance(e, ev.ApprovalRequested):
        return ApprovalNotice(
            tenant_id=s.tenant_id, run_id=s.run_id, request_id=e.request_id, tool=e.tool,
            args=e.args, evidence=e.evidence, risks=tuple(e.risks),
            required_role=e.required_role, expires_at=e.expires_at, kind="approval",
        )
    return ApprovalNotice(
        tenant_id=s.tenant_id, run_id=s.run_id, request_id=str(e.request_id), tool="",
        args=None, evidence=e.context, required_role=e.required_role,
        expires_at=e.expires_at or 0.0, kind="question", question=e.question,
    )
