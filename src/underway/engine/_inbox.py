"""The run's inbox, read at a step boundary: cancellations, resolutions and resumes sent by
operators, signed decisions (verified here against the request the run waits on; again
right before an approved call runs, by :mod:`underway.guard.approvals.check`), the ends of
its child runs, and the signals its steps wait for."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from .. import events as ev
from ..codec import signal_where
from ..control import CANCEL, RESOLVE, RESUME, resolution_of, resumption_of
from ..control import CHILD as CHILD_SIGNAL
from ..errors import IntegrityError, KeyUnavailable, UnderwayError
from ..events import JSON
from ..guard.approvals import ApprovalCheck, SignedDecision, verify_decision
from ..journal.state import (
    ANSWER_SIGNAL,
    APPROVAL_SIGNAL,
    Escalation,
    PendingApproval,
)
from ..store.base import CoreStore, SignalRecord
from ._activation import Activation
from ._outbox import child_finished

OpenedSignal = tuple[SignalRecord, JSON | UnderwayError]
"""A signal of the inbox with its payload opened — or why it cannot be: its key is not here
(:class:`~underway.errors.KeyUnavailable`: destroyed), or it is not what was stored
(:class:`~underway.errors.IntegrityError`: altered, moved, not JSON)."""


def pending_signals(
    store: CoreStore, tenant_id: str, run_id: str, waiting: str | None
) -> list[OpenedSignal]:
    """What the run acts on of its inbox, oldest first: its control signals and the oldest
    signal named ``waiting`` (:meth:`~underway.store.inbox.InboxStore.actionable_signals`),
    each with its payload opened through the store's codec (synchronous: run it on the
    store's I/O threads). The signals it consumed, and those it leaves unread, are not
    read: the cost stays that of the first activation however long the run lives."""
    out: list[OpenedSignal] = []
    for sig in store.actionable_signals(tenant_id, run_id, waiting=waiting):
        try:
            out.append((sig, store.codec.open_json(
                sig.payload, signal_where(tenant_id, sig.signal_id, sig.name))))
        except UnderwayError as exc:
            out.append((sig, exc))
        except ValueError as exc:
            out.append((sig, IntegrityError(
                f"signal {sig.signal_id!r} of run {run_id}: its payload is not JSON ({exc})")))
    return out


async def read_inbox(act: Activation, signals: list[OpenedSignal] | None = None) -> None:
    """Take what the run's inbox holds (``signals``: read with the run already)."""
    s, svc = act.state, act.services
    if signals is None:
        signals = await svc.io(pending_signals, svc.store, s.tenant_id, s.run_id,
                               s.waiting_signal)
    for sig, payload in signals:
        if s.final:
            break
        if isinstance(payload, KeyUnavailable):
            # Its key was destroyed (its subject erased): consumed, and why journaled.
            act.consumed.append(sig.signal_id)
            act.buffer(ev.SignalIgnored(
                signal=sig.name, signal_id=sig.signal_id,
                reason=f"its payload cannot be opened: {payload}",
            ))
            continue
        if isinstance(payload, UnderwayError):
            # Not what was stored: the activation fails (and backs off, then the run stops
            # dead, the reason journaled) rather than act on it.
            raise payload
        if sig.name == CANCEL:
            act.consumed.append(sig.signal_id)
            act.buffer(ev.RunCancelled(by=str(payload.get("by", "unknown")),
                                       reason=str(payload.get("reason", ""))))
        elif sig.name == RESOLVE:
            act.consumed.append(sig.signal_id)
            if s.status == "escalated" and svc.guard.signed_resolutions:
                act.buffer(ev.SignalIgnored(
                    signal=sig.name, signal_id=sig.signal_id,
                    reason="unsigned resolution refused: this worker requires a "
                           "resolution signed by an approver (underway approvals resolve)",
                ))
            elif s.status == "escalated":
                act.buffer(ev.EscalationResolved(
                    key=s.escalation.key if s.escalation is not None else None,
                    resolution=payload["resolution"],
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
            if s.status == "dead" and svc.guard.signed_resolutions:
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
        elif sig.name == CHILD_SIGNAL:
            act.consumed.append(sig.signal_id)
            finished = child_finished(s, payload)
            if finished is not None:
                act.buffer(finished)
            else:
                act.buffer(ev.SignalIgnored(
                    signal=sig.name, signal_id=sig.signal_id,
                    reason="names no child of this run whose end is not journaled yet",
                ))
        elif sig.name in (APPROVAL_SIGNAL, ANSWER_SIGNAL):
            act.consumed.append(sig.signal_id)
            await take_decision(act, payload, sig.name == ANSWER_SIGNAL)
        elif s.waiting_signal == sig.name and s.status == "waiting":
            act.consumed.append(sig.signal_id)
            act.buffer(ev.SignalReceived(signal=sig.name, signal_id=sig.signal_id,
                                         payload=payload, sender=sig.sender))
    act.control_pending = False


@dataclass(frozen=True, slots=True)
class DeadRequest:
    """The request a signed resume of a dead run answers: its dead-lettering's id (no
    role required, no expiry)."""

    request_id: str | None
    required_role: str | None = None
    expires_at: float | None = None
    key: str | None = None


async def take_decision(act: Activation, payload: JSON, answer: bool) -> None:
    """Verify a submitted decision against the request the run waits on; journal the
    verified decision, or why it was refused (the run then keeps waiting).

    Args:
        act: The run's activation.
        payload: The signal's payload: a signed decision.
        answer: Whether it came as an answer (to a question, or a resolution).
    """
    s = act.state
    try:
        d = SignedDecision.model_validate(payload)
    except ValidationError:
        act.buffer(ev.ApprovalInvalid(request_id=None, approver_id=None,
                                      reason="malformed"))
        return
    if answer and s.status == "dead" and d.decision == "resolve":
        # A signed resume of a dead run names the dead-lettering it answers.
        pending: Escalation | PendingApproval | DeadRequest | None = DeadRequest(
            s.dead_request)
        check_tool, check_hash = "", ""
        if resumption_of(d.answer) is None:
            act.buffer(ev.ApprovalInvalid(request_id=d.request_id,
                                          approver_id=d.approver_id,
                                          reason="malformed_resolution"))
            return
    elif answer:
        # An answer settles a question; a resolution settles any other escalation.
        esc = s.escalation
        asks = esc is not None and esc.is_question
        pending = esc if s.status == "escalated" and asks == (d.decision != "resolve") \
            else None
        check_tool, check_hash = "", ""
        if d.decision == "resolve" and esc is not None:
            check_tool = esc.tool or ""
            call = next((c for c in s.calls if c.key and c.key == esc.key), None)
            check_hash = call.args_hash if call is not None else ""
            if resolution_of(d.answer) is None:
                act.buffer(ev.ApprovalInvalid(request_id=d.request_id,
                                              approver_id=d.approver_id,
                                              reason="malformed_resolution"))
                return
    else:
        pending = s.pending_approval if s.status == "waiting" else None
        check_tool = pending.tool if pending is not None else ""
        check_hash = pending.args_hash if pending is not None else ""
    if pending is None or pending.request_id != d.request_id:
        act.buffer(ev.ApprovalInvalid(
            request_id=d.request_id, approver_id=d.approver_id,
            reason="not_pending",
        ))
        return
    expires = pending.expires_at
    check = ApprovalCheck(
        request_id=d.request_id, run_id=s.run_id, tenant_id=s.tenant_id, tool=check_tool,
        args_hash=check_hash, required_role=pending.required_role,
        expires_at=float(expires) if expires is not None else float("inf"),
    )
    now = act.services.clock.now()
    store = act.services.store

    def judge() -> str | None:
        # One trip: the approver's key, the signature, and the nonce spent only when the
        # decision holds.
        approver = store.get_approver(s.tenant_id, d.approver_id)
        reason = verify_decision(d, check=check, approver=approver, now=now)
        if reason is None and (d.decision in ("answer", "resolve")) != answer:
            reason = "wrong_decision_kind"
        if reason is None and not store.use_nonce(
            s.tenant_id, d.nonce, run_id=s.run_id, request_id=d.request_id, at=now,
        ):
            reason = "replayed_nonce"
        return reason

    reason = await act.services.io(judge)
    if reason is not None:
        act.buffer(ev.ApprovalInvalid(request_id=d.request_id, approver_id=d.approver_id,
                                      reason=reason))
        return
    signed = d.model_dump(mode="json")
    resolution = resolution_of(d.answer) if d.decision == "resolve" else None
    if s.status == "dead":
        step = resumption_of(d.answer)
        act.buffer(ev.RunResumed(by=d.approver_id, step=step or None, decision=signed))
    elif resolution is not None:
        act.buffer(ev.EscalationResolved(
            key=pending.key, resolution=resolution[0], result=resolution[1],
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
