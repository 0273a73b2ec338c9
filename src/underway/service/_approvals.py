"""``/v1/approvals``: what runs wait for a person to decide (approvals, questions,
escalations), and signed decisions on them. The API never signs: it accepts a decision
signed where the approver's private key is (``underway approvals approve``, or the console
later), checks what can be checked without the run, and delivers it; the run verifies it
again immediately before anything happens."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from ..approvals import SignedDecision
from ..errors import ConfigurationError
from ._auth import Caller, State, endpoint
from ._models import Accepted, Pending
from ._problems import ApiProblem, invalid, not_found

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

RunId = Annotated[str, Path(min_length=1, description="The run's id.")]


@endpoint(router, "GET", "", permission="read", run_data=True, response_model=list[Pending])
def inbox(
    state: State, who: Caller, request: Request,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[Pending]:
    """Runs waiting for a person — approvals (exact action, args and their hash, evidence,
    risks, role, expiry), questions, escalations — soonest expiry first."""
    found = state.client.pending_requests(tenant_id=who.tenant_id, limit=limit)
    state.record_reads(request, who, [r.run_id for r in found])
    return [Pending.of(r) for r in found]


@endpoint(router, "GET", "/{run_id}", permission="read", run_data=True,
          response_model=Pending, problems=(404,))
def detail(state: State, who: Caller, run_id: RunId, request: Request) -> Pending:
    """What the run waits for a person to decide (a resolution carries the escalated
    call's arguments)."""
    found = state.client.pending_request(run_id, tenant_id=who.tenant_id)
    if found is None:
        state.client.get_run(run_id, tenant_id=who.tenant_id)
        raise not_found("pending request for this run")
    state.record_reads(request, who, [run_id])
    return Pending.of(found)


@endpoint(router, "POST", "/{run_id}/decision", permission="decide", response_model=Accepted,
          status_code=202, problems=(404,))
def decide(state: State, who: Caller, run_id: RunId, body: SignedDecision) -> Accepted:
    """Deliver a decision signed by a registered approver (the canonical payload
    ``underway approvals approve|reject|answer|resolve`` signs). Refused with a 422 when
    it could never pass: another run or tenant, an unregistered or revoked approver, a
    signature that does not verify, an expired decision."""
    state.client.get_run(run_id, tenant_id=who.tenant_id)
    if body.run_id != run_id:
        raise invalid("body.run_id", f"the decision is for run {body.run_id!r}, not {run_id!r}")
    if body.tenant_id != who.tenant_id:
        raise invalid("body.tenant_id", "the decision is for another tenant than the key's")
    try:
        delivered = state.client.submit_decision(body.model_dump(mode="json"),
                                                 tenant_id=who.tenant_id)
    except ConfigurationError as exc:
        raise ApiProblem(422, "decision-refused", "Decision refused", str(exc)) from None
    return Accepted(run_id=run_id, delivered=delivered,
                    note="" if delivered else "the same decision was already delivered")
