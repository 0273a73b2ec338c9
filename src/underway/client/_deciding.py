"""Deciding and answering from Python, and what a run waits on, in words.

:meth:`Deciding.decide` and :meth:`Deciding.answer` do what ``underway approvals approve``
and ``underway approvals answer`` do: read the request the run waits on, sign a decision on
exactly it with the approver's private key (the key never leaves this process), check it
as the run will, and deliver it (:meth:`~underway.client.Client.submit_decision`).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol

from ..clock import Clock
from ..control import CHILD
from ..errors import ConfigurationError
from ..events import JSON
from ..guard.approvals import ApprovalCheck, SignedDecision, sign_decision, verify_decision
from ..guard.approvals.decision import REASON_TEXT, Decision
from ..guard.approvals.keys import public_key_of
from ..journal.state import RunState
from ..store.base import RunRecord
from ..store.records import FINAL
from ._requests import PendingRequest, request_of
from ._transport import Transport

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

OPEN_ENDED = 86400.0
"""How long a decision on a request that never expires stays valid."""

_KIND = {"approve": "approval", "reject": "approval", "answer": "question"}
_TEXT = {"approval": "an approval", "question": "an answer", "resolution": "a resolution"}


class _Reading(Protocol):
    """What deciding needs of the client."""

    _transport: Transport

    @property
    def clock(self) -> Clock: ...

    def pending_request(self, run_id: str, *,
                        tenant_id: str = "default") -> PendingRequest | None: ...

    def find_run(self, run_id: str, *, tenant_id: str = "default") -> RunRecord: ...

    def submit_decision(self, decision: JSON, *, tenant_id: str = "default") -> bool: ...


class Deciding:
    """The client's signed decisions and answers, and :meth:`waiting_on`."""

    def decide(self: _Reading, run_id: str, decision: Literal["approve", "reject"], *,
               key: Ed25519PrivateKey, approver_id: str, comment: str = "",
               tenant_id: str = "default") -> SignedDecision:
        """Approve or reject the call run ``run_id`` waits on, signed with ``key``.

        Args:
            run_id: The run (or a unique prefix of its id).
            decision: ``approve`` or ``reject``.
            key: The approver's Ed25519 private key (it stays here).
            approver_id: The registered approver whose key it is.
            comment: Why; signed and journaled with the decision.
            tenant_id: The run's tenant.

        Returns:
            The signed decision, as delivered.

        Raises:
            ConfigurationError: The run waits for no approval, the key is not the one
                registered for ``approver_id``, or the run would refuse the decision.
            RunNotFound: No such run.
        """
        if decision not in ("approve", "reject"):
            raise ConfigurationError(f"decide approves or rejects, not {decision!r}; "
                                     "answer a question with Client.answer")
        return _sign_and_send(self, run_id, decision, key=key, approver_id=approver_id,
                              comment=comment, answer=None, tenant_id=tenant_id)

    def answer(self: _Reading, run_id: str, answer: JSON, *, key: Ed25519PrivateKey,
               approver_id: str, comment: str = "",
               tenant_id: str = "default") -> SignedDecision:
        """Answer the question run ``run_id`` asked (``ctx.ask``), signed with ``key``:
        the step's ``ctx.ask`` returns ``answer``.

        Args:
            run_id: The run (or a unique prefix of its id).
            answer: The answer, as JSON.
            key: The approver's Ed25519 private key (it stays here).
            approver_id: The registered approver whose key it is.
            comment: Why; signed and journaled with the answer.
            tenant_id: The run's tenant.

        Returns:
            The signed answer, as delivered.

        Raises:
            ConfigurationError: The run asks no question, the key is not the one
                registered for ``approver_id``, or the run would refuse the answer.
            RunNotFound: No such run.
        """
        return _sign_and_send(self, run_id, "answer", key=key, approver_id=approver_id,
                              comment=comment, answer=answer, tenant_id=tenant_id)

    def waiting_on(self: _Reading, row: RunRecord) -> str | None:
        """What the run ``row`` waits on, in words: ``approval by procurement``, ``an
        answer from finance``, ``signal paid (until 2026-12-07 09:00 UTC)``, ``a timer
        until ...``, ``a worker``. None once it is finished. Only a run that waits for a
        person is read beyond its row.

        Args:
            row: The run's row.
        """
        request = None
        if row.status in ("escalated", "dead") or row.waiting_signal == "underway.approval":
            request = self.pending_request(row.run_id, tenant_id=row.tenant_id)
        return waiting_words(row, request)


def waiting_words(run: RunRecord | RunState, request: PendingRequest | None = None
                  ) -> str | None:
    """What a run waits on, in words (None once it is finished).

    Args:
        run: The run's row, or its folded state (which names its request itself).
        request: What the row's run waits for a person to decide, if anything.
    """
    if isinstance(run, RunState):
        status: str = run.status
        signal, wake = run.waiting_signal, run.wake_at
        request = request_of(run)
    else:
        status, signal, wake = run.status, run.waiting_signal, run.next_wake_at
    if status in FINAL:
        return None
    if request is not None:
        role = request.required_role
        if request.kind == "approval":
            return f"approval by {role or 'any approver'}"
        if request.kind == "question":
            return f"an answer from {role or 'any approver'}"
        if request.cause == "dead":
            return "a person to resume it"
        return f"a person to settle {request.tool or 'an escalation'}"
    if status == "dead":
        return "a person to resume it"
    if status == "escalated":
        return "a person to settle an escalation"
    if status in ("ready", "running"):
        return "a worker"
    if signal == CHILD:
        return "a child run"
    until = _at(wake)
    if signal is not None:
        return f"signal {signal}" + (f" (until {until})" if until else "")
    return f"a timer until {until}" if until else "a timer"


def _at(at: float | None) -> str | None:
    if at is None or not math.isfinite(at):
        return None
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _sign_and_send(client: _Reading, run_id: str, decision: Decision, *,
                   key: Ed25519PrivateKey, approver_id: str, comment: str, answer: JSON,
                   tenant_id: str) -> SignedDecision:
    tenant_id = client._transport.tenant(tenant_id)
    row = client.find_run(run_id, tenant_id=tenant_id)
    r = client.pending_request(row.run_id, tenant_id=tenant_id)
    wanted = _KIND[decision]
    if r is None or r.kind != wanted:
        has = "nothing" if r is None else _TEXT[r.kind]
        raise ConfigurationError(f"run {row.run_id!r} waits for {has}, not {_TEXT[wanted]}")
    approver = client._transport.approver(tenant_id, approver_id)
    if approver is None or approver.public_key != public_key_of(key):
        raise ConfigurationError(
            f"this key is not the one registered for approver {approver_id!r} in tenant "
            f"{tenant_id!r}")
    now = client.clock.now()
    signed = sign_decision(
        key, request_id=r.request_id, run_id=r.run_id, tenant_id=tenant_id, tool=r.tool,
        args_hash=r.args_hash, decision=decision,
        expires_at=now + OPEN_ENDED if math.isinf(r.expires_at) else r.expires_at,
        approver_id=approver_id, comment=comment, answer=answer)
    check = ApprovalCheck(request_id=r.request_id, run_id=r.run_id, tenant_id=tenant_id,
                          tool=r.tool, args_hash=r.args_hash, required_role=r.required_role,
                          expires_at=r.expires_at)
    reason = verify_decision(signed, check=check, approver=approver, now=now)
    if reason is not None:
        raise ConfigurationError(f"run {r.run_id!r} would refuse this decision: "
                                 f"{REASON_TEXT[reason]} ({reason})")
    client.submit_decision(signed.model_dump(mode="json"), tenant_id=tenant_id)
    return signed
