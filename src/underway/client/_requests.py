"""What a run waits for a person to decide — an approval, an answer, a resolution — read
from its folded state."""

from __future__ import annotations

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Literal, cast

from ..codec import ENCRYPTED, SEALED_TEXT, Codec, run_error_where
from ..effects._summary import one_line
from ..events import JSON
from ..journal.state import APPROVAL_SIGNAL, PendingApproval, RunState, RunStatus
from ..money import format_money
from ..redaction import Hidden, Redactor
from ..store.base import RunRecord

RequestKind = Literal["approval", "question", "resolution"]


@dataclass(frozen=True, slots=True)
class PendingRequest:
    """A request a run waits on, with everything a person needs to decide it.

    ``kind``: ``approval`` (a tool call held by policy: ``tool``, ``args`` and their
    ``args_hash``, ``evidence``, ``risks``), ``question`` (``ctx.ask``: ``question`` and
    ``context``) or ``resolution`` (an escalation — unknown outcome, deadline, budget:
    ``cause``, the call's ``key``; or a dead run, ``cause == "dead"``). ``expires_at`` is
    ``inf`` when the request never expires. ``args`` of a resolution are filled in by
    :meth:`~underway.client.Client.pending_request` (read from the call's journaled
    intent), not by :meth:`~underway.client.Client.pending_requests`.
    ``sensitive_fields`` and ``secret_fields``: what the tool hides of its arguments
    (:func:`redact_request` shows the request as a viewer may see it).
    """

    run_id: str
    kind: RequestKind
    request_id: str
    tool: str
    args: JSON
    args_hash: str
    evidence: JSON
    risks: list[str]
    required_role: str | None
    expires_at: float
    question: str | None = None
    context: JSON = None
    rule_id: str | None = None
    policy_version: str | None = None
    cause: str | None = None
    key: str | None = None
    sensitive_fields: tuple[str, ...] = ()
    secret_fields: tuple[str, ...] = ()
    summary: str = ""
    """One line that says what is decided: the step's or the tool's summary, else the
    call, question or escalation in words."""
    money: JSON = None
    """The money the guard read for an approval's call (``amount`` as a decimal string,
    ``currency``, ``direction``, ``account``); None when it moves none."""
    moves: str | None = None
    """:attr:`money` in words, in the currency's locale: ``moves ₹2,32,000.00 out of
    ACME-OPS``."""


def money_words(money: JSON) -> str | None:
    """The money a call moves, as an approver reads it (``moves ₹2,32,000.00 out of
    ACME-OPS``, ``brings in $1,234.50``; ``moves €12.00`` for a tool whose amount's sign
    says the way); None when ``money`` is not a reading.

    Args:
        money: An ``ApprovalRequested`` event's ``money``.
    """
    if not isinstance(money, dict) or not isinstance(money.get("currency"), str):
        return None
    try:
        amount = Decimal(str(money.get("amount")))
    except ArithmeticError:
        return None
    account = money.get("account")
    shown = format_money(amount.copy_abs(), str(money["currency"]))
    way = money.get("direction")
    if way == "out":
        return f"moves {shown} out of {account}" if account else f"pays out {shown}"
    if way == "in":
        return f"moves {shown} into {account}" if account else f"brings in {shown}"
    return f"moves {shown}" + (f" through {account}" if account else "")


def _approval_summary(p: PendingApproval) -> str:
    if p.summary:
        return p.summary
    words = money_words(p.money)
    return f"Call {p.tool}" + (f": {words}" if words else "")


def request_of(state: RunState) -> PendingRequest | None:
    """The approval request, question or resolution the run waits on, if any."""
    if state.status == "waiting" and state.pending_approval is not None:
        p = state.pending_approval
        return PendingRequest(
            run_id=state.run_id, kind="approval", request_id=p.request_id, tool=p.tool,
            args=p.args, args_hash=p.args_hash, evidence=p.evidence, risks=list(p.risks),
            required_role=p.required_role, expires_at=p.expires_at, rule_id=p.rule_id,
            policy_version=p.policy_version, sensitive_fields=tuple(p.sensitive_fields or ()),
            secret_fields=tuple(p.secret_fields or ()), summary=_approval_summary(p),
            money=p.money, moves=money_words(p.money),
        )
    esc = state.escalation
    if state.status == "escalated" and esc is not None and esc.is_question:
        return PendingRequest(
            run_id=state.run_id, kind="question", request_id=str(esc.request_id), tool="",
            args=None, args_hash="", evidence=None, risks=[],
            required_role=esc.required_role, expires_at=_expiry(esc.expires_at),
            question=esc.question, context=esc.context,
            summary=one_line(esc.question or "A question"),
        )
    if state.status == "dead" and state.dead_request is not None:
        return PendingRequest(
            run_id=state.run_id, kind="resolution", request_id=state.dead_request, tool="",
            args=None, args_hash="", evidence=None, risks=[], required_role=None,
            expires_at=float("inf"), question=state.error, cause="dead",
            summary=one_line(f"Resume a dead run: {state.error or 'it stopped'}"),
        )
    if state.status == "escalated" and esc is not None and esc.request_id:
        # Anything else a person must settle: an unknown outcome, a deadline, a budget.
        key = esc.key
        call = next((c for c in state.calls if key and c.key == key), None)
        return PendingRequest(
            run_id=state.run_id, kind="resolution", request_id=esc.request_id,
            tool=esc.tool or "", args=None,
            args_hash=call.args_hash if call is not None else "", evidence=None, risks=[],
            required_role=None, expires_at=float("inf"), question=esc.reason,
            cause=esc.cause, key=key,
            summary=one_line(f"Settle {esc.tool or 'the run'}: {esc.reason}"),
        )
    return None


def redact_request(r: PendingRequest, *, reveal: bool = False,
                   redactor: Redactor | None = None) -> PendingRequest:
    """``r`` as a viewer sees it (:mod:`underway.redaction`).

    The fields its tool hides are redacted in its arguments, evidence, question and context.
    Secrets always are; sensitive fields unless ``reveal``.

    Args:
        r: The pending request.
        reveal: Show sensitive fields.
        redactor: One that learned the run's events: it hides what else the run's hidden
            fields held. Else a new one.
    """
    hidden = Hidden.of(r)
    red = redactor if redactor is not None else Redactor(reveal=reveal)
    if hidden:
        red.learn_names(hidden)
        red.learn_values([r.args, r.evidence], hidden)
    return red.fields(r, "args", "evidence", "question", "context", "summary", "money", "moves")


def _expiry(value: float | None) -> float:
    return float("inf") if value is None else float(value)


def sealed_state(row: RunRecord) -> RunState:
    """What a run whose journal cannot be opened here is, as far as its row tells: its
    flow, status, step and times; its input, state and result ``[encrypted]``."""
    return RunState(
        tenant_id=row.tenant_id, run_id=row.run_id, flow=row.flow,
        status=cast(RunStatus, row.status), input=ENCRYPTED, state=ENCRYPTED, step=row.step,
        waiting_signal=row.waiting_signal, result=ENCRYPTED, error=row.error,
        created_at=row.created_at, updated_at=row.updated_at, seq=row.last_seq,
    )


def sealed_request(row: RunRecord) -> PendingRequest | None:
    """What a run whose journal cannot be opened here (encrypted, no key) waits for, as far
    as its row tells: an approval or a question/resolution, its details ``[encrypted]``."""
    if row.status == "waiting" and row.waiting_signal == APPROVAL_SIGNAL:
        kind: RequestKind = "approval"
    elif row.status in ("escalated", "dead"):
        kind = "resolution"
    else:
        return None
    return PendingRequest(
        run_id=row.run_id, kind=kind, request_id=ENCRYPTED, tool=ENCRYPTED, args=ENCRYPTED,
        args_hash="", evidence=ENCRYPTED, risks=[], required_role=None,
        expires_at=float("inf"), question=ENCRYPTED, context=ENCRYPTED,
    )


def readable_row(codec: Codec, row: RunRecord) -> RunRecord:
    """``row`` with its ``error`` opened through ``codec`` (``[encrypted]`` when it is
    sealed and cannot be opened here)."""
    if row.error is None or not row.error.startswith(SEALED_TEXT):
        return row
    return replace(row, error=codec.open_text(row.error,
                                              run_error_where(row.tenant_id, row.run_id)))
