"""``/v1/approvals``: what runs wait for a person to decide (approvals, questions,
escalations), and signed decisions on them. The API never signs: it accepts a decision
signed where the approver's private key is (``underway approvals approve``, or the
console in the browser), checks it against what the run waits for, and delivers it; the
run verifies it again immediately before anything happens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from ..client import PendingRequest, redact_request
from ..errors import ConfigurationError
from ..guard.approvals import ApprovalCheck, SignedDecision, verify_decision
from ..guard.approvals.decision import REASON_TEXT
from ._auth import Caller, ServiceState, State, endpoint
from ._inputs import CheckedRoute
from ._models import Accepted, Pending
from ._problems import ApiProblem, invalid, not_found
from ._reading import Read

router = APIRouter(prefix="/v1/approvals", tags=["approvals"], route_class=CheckedRoute)

RunId = Annotated[str, Path(min_length=1, description="The run's id.")]


@endpoint(router, "GET", "", permission="read", run_data=True, response_model=list[Pending],
          problems=(403,))
def list_approvals(
    state: State, who: Caller, request: Request, read: Read,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Pending]:
    """Runs waiting for a person — approvals (exact action, args and their hash, evidence,
    risks, role, expiry), questions, escalations — soonest expiry first, each with its
    run's labels; the fields their tools hide, and sensitive labels, redacted unless
    ``reveal``."""
    read = read.allowed(state, who)
    found = state.client.pending_requests(tenant_id=who.tenant_id, limit=limit)
    state.record_reads(request, who, [r.run_id for r in found], purpose=read.purpose,
                       revealed=read.reveal)
    labels = state.client.run_labels([r.run_id for r in found], tenant_id=who.tenant_id,
                                     reveal=read.reveal)
    return [Pending.of(redact_request(r, redactor=state.client.redactor(
        r.run_id, tenant_id=who.tenant_id, reveal=read.reveal))).model_copy(
            update={"labels": labels.get(r.run_id, {})}) for r in found]


@endpoint(router, "GET", "/{run_id}", permission="read", run_data=True,
          response_model=Pending, problems=(403, 404))
def get_approval(state: State, who: Caller, run_id: RunId, request: Request,
           read: Read) -> Pending:
    """What the run waits for a person to decide (a resolution carries the escalated
    call's arguments). The fields the tool hides are redacted unless ``reveal``, which an
    approver may ask for here: a decision signs over the exact arguments (whose
    ``args_hash`` is shown either way)."""
    read = read.allowed(state, who, deciding=True)
    found = state.client.pending_request(run_id, tenant_id=who.tenant_id)
    if found is None:
        state.client.get_run(run_id, tenant_id=who.tenant_id)
        raise not_found("pending request for this run")
    hide = state.client.redactor(run_id, tenant_id=who.tenant_id, reveal=read.reveal)
    state.record_reads(request, who, [run_id], purpose=read.purpose, revealed=read.reveal)
    labels = state.client.run_labels([run_id], tenant_id=who.tenant_id, reveal=read.reveal)
    return Pending.of(redact_request(found, redactor=hide)).model_copy(
        update={"labels": labels.get(run_id, {})})


@endpoint(router, "POST", "/{run_id}/decision", permission="decide", response_model=Accepted,
          status_code=202, problems=(404,))
def submit_decision(state: State, who: Caller, run_id: RunId, body: SignedDecision) -> Accepted:
    """Deliver a decision signed by a registered approver: the RFC 8785 (JCS) payload
    ``underway approvals approve|reject|answer|resolve`` signs, or one signed before JCS
    (without ``canon``). Refused with a 422 when
    it could never pass: another run or tenant, an unregistered or revoked approver, a
    signature that does not verify, an expired decision, or — while the run waits for a
    person — one that does not answer what it waits for (another request, tool or
    arguments, a missing role, the wrong kind of decision)."""
    return deliver_decision(state, who.tenant_id, run_id, body)


def deliver_decision(state: ServiceState, tenant_id: str, run_id: str,
                     body: SignedDecision) -> Accepted:
    """Check a signed decision on ``run_id`` and deliver it to the run's inbox: the one
    path of the API and of the console (which never signs either). Raises a 404 problem
    for an unknown run and a 422 for a decision that could never pass; nothing is stored
    then."""
    state.client.get_run(run_id, tenant_id=tenant_id)
    if body.run_id != run_id:
        raise invalid("body.run_id", f"the decision is for run {body.run_id!r}, not {run_id!r}")
    if body.tenant_id != tenant_id:
        raise invalid("body.tenant_id", "the decision is for another tenant than the key's")
    pending = state.client.pending_request(run_id, tenant_id=tenant_id)
    if pending is not None:
        # What the run will check when it resumes, checked now: a decision that cannot
        # answer what the run waits for is refused before it reaches the inbox.
        reason = _answers(state, tenant_id, pending, body)
        if reason is not None:
            raise ApiProblem(422, "decision-refused", "Decision refused",
                             f"run {run_id!r} waits on request {pending.request_id!r}; "
                             f"this decision would be refused: {reason}")
    try:
        delivered = state.client.submit_decision(body.model_dump(mode="json"),
                                                 tenant_id=tenant_id)
    except ConfigurationError as exc:
        raise ApiProblem(422, "decision-refused", "Decision refused", str(exc)) from None
    return Accepted(run_id=run_id, delivered=delivered,
                    note="" if delivered else "the same decision was already delivered")


_KIND = {"approve": "approval", "reject": "approval", "answer": "question",
         "resolve": "resolution"}
_WHAT = {"approval": "an approval", "question": "a question", "resolution": "a resolution"}


def _answers(state: ServiceState, tenant_id: str, pending: PendingRequest,
             body: SignedDecision) -> str | None:
    """Why ``body`` cannot settle ``pending`` (None when it can, as far as the server
    can tell before the run does)."""
    if _KIND[body.decision] != pending.kind:
        return f"a decision {body.decision!r} does not settle {_WHAT[pending.kind]}"
    check = ApprovalCheck(
        request_id=pending.request_id, run_id=pending.run_id, tenant_id=tenant_id,
        tool=pending.tool, args_hash=pending.args_hash, required_role=pending.required_role,
        expires_at=pending.expires_at,
    )
    approver = state.store.get_approver(tenant_id, body.approver_id)
    reason = verify_decision(body, check=check, approver=approver,
                             now=state.client.clock.now())
    return None if reason is None else f"{REASON_TEXT[reason]} ({reason})"
