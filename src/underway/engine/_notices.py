"""What a notifier is told when a run waits for a person: an approval request, a question
or an escalation to resolve, as an :class:`~underway.guard.approvals.notify.ApprovalNotice`."""

from __future__ import annotations

from .. import events as ev
from ..guard.approvals.notify import ApprovalNotice
from ..journal.state import RunState


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
