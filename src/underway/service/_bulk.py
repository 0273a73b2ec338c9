"""``/v1/runs/bulk/{action}``: one action on every run of the key's tenant that the query
selects — the filter of ``GET /v1/runs``. Each is :meth:`~underway.client.Client.bulk`.

A request is a dry run unless its body says ``"dry_run": false``. The answer counts the
runs by outcome and lists each with its outcome. Unsigned actions (resume, cancel,
resolve) need a key that may steer runs; each run journals the key's name as who acted.
Signed ones (answer, approve, reject, and settle: a signed resume or resolution) need a
key that may decide; the server only verifies them. Their dry run names the request each
run waits on; the caller signs one decision per run and sends them as ``decisions``.
Where runs settle only with signed resolutions, resume and resolve are refused (409):
settle them instead.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field, JsonValue, ValidationError

from ..client import BulkAction, BulkResult, PendingRequest, RunFilter
from ..events import JSON
from ..guard.approvals import SignedDecision
from ..guard.approvals.decision import Decision
from ._auth import Caller, Principal, State, endpoint
from ._inputs import CheckedRoute
from ._models import _Request
from ._problems import invalid
from ._runs import RunQuery

router = APIRouter(prefix="/v1/runs/bulk", tags=["bulk"], route_class=CheckedRoute)

MAX_DECISIONS = 10_000
"""The most signed decisions one request may carry."""


class _Bulk(_Request):
    dry_run: bool = Field(default=True, description="Only report what would be done.")


class _Signed(_Bulk):
    decisions: Annotated[list[JsonValue], Field(
        default_factory=list, max_length=MAX_DECISIONS,
        description="One signed decision per run, each on the request a dry run named for "
        "it (``POST /v1/approvals/{run_id}/decision`` takes the same). A run without one "
        "is skipped.")]


class BulkResume(_Bulk):
    """Resume dead runs, at ``step`` or where each stopped (unsigned)."""

    step: str | None = Field(default=None, min_length=1)


class BulkCancel(_Bulk):
    """Cancel unfinished runs at their next step boundary; ``reason`` is journaled."""

    reason: str = ""


class BulkResolve(_Bulk):
    """Resolve escalations, unsigned: the effect ``succeeded`` (with ``result``),
    ``failed``, or may be ``retry``-ed."""

    resolution: Literal["succeeded", "failed", "retry"]
    result: JsonValue = None


class BulkSettle(_Signed):
    """Settle runs with signed resolutions: ``resume`` dead runs (at ``step``), or say
    of escalated calls that they ``succeeded`` (with ``result``), ``failed`` or may be
    ``retry``-ed. Each run's decision is a ``resolve`` carrying that resolution."""

    resolution: Literal["resume", "succeeded", "failed", "retry"]
    step: str | None = Field(default=None, min_length=1)
    result: JsonValue = None


class BulkAnswer(_Signed):
    """Answer every run that asks ``question`` with ``answer``: each run's decision is
    signed for it and carries that answer."""

    question: str = Field(min_length=1)
    answer: JsonValue


class BulkDecide(_Signed):
    """Approve or reject the action each run waits on, one signed decision per run."""


class BulkRun(BaseModel):
    """What the operation did to one run: ``done`` (sent), ``eligible`` (a dry run would
    send it), ``skipped`` or ``failed`` (``reason`` says why). ``request_id``: the request
    the run waits on, which its signed decision must name."""

    run_id: str
    outcome: Literal["done", "eligible", "skipped", "failed"]
    reason: str = ""
    request_id: str | None = None


class BulkReport(BaseModel):
    """A bulk operation: its action, whether it was a dry run, how many runs matched, the
    counts by outcome, each run (newest first), and the runs named by decisions that
    the filter did not select (nothing was sent to those)."""

    action: str
    dry_run: bool
    matched: int
    counts: dict[str, int]
    runs: list[BulkRun]
    unused_decisions: list[str] = []


def _report(result: BulkResult, unused: list[str]) -> BulkReport:
    return BulkReport(
        action=result.action, dry_run=result.dry_run, matched=len(result.items),
        counts=result.counts, unused_decisions=unused,
        runs=[BulkRun(run_id=i.run_id, outcome=i.outcome, reason=i.reason,
                      request_id=i.request_id) for i in result.items])


class _Given:
    """A :data:`~underway.client.Signer` that signs nothing: it hands each run the
    decision the caller signed for it, when that decision answers the run's request."""

    def __init__(self, decisions: list[JsonValue], tenant_id: str) -> None:
        self.by_run: dict[str, JSON] = {}
        for index, raw in enumerate(decisions):
            try:
                d = SignedDecision.model_validate(raw)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise invalid(f"body.decisions.{index}", f"not a signed decision: "
                              f"{where or 'decision'}: {first['msg']}") from None
            if d.tenant_id != tenant_id:
                raise invalid(f"body.decisions.{index}",
                              "the decision is for another tenant than this key's")
            if d.run_id in self.by_run:
                raise invalid(f"body.decisions.{index}",
                              f"a second decision for run {d.run_id}")
            self.by_run[d.run_id] = raw

    def __call__(self, tenant_id: str, request: PendingRequest, decision: Decision,
                 answer: JSON) -> JSON:
        raw = self.by_run.get(request.run_id)
        if raw is None:
            return None
        d = SignedDecision.model_validate(raw)
        if d.request_id != request.request_id or d.decision != decision:
            return None
        if answer is not None and d.answer != answer:
            return None
        return raw

    def unused(self, selected: BulkResult) -> list[str]:
        seen = {i.run_id for i in selected.items}
        return sorted(r for r in self.by_run if r not in seen)


def run_bulk(state: State, who: Principal, action: BulkAction, chosen: RunFilter,
             body: _Bulk, **options: object) -> BulkReport:
    """``action`` on the runs ``chosen`` selects, as ``body`` says: what every bulk
    endpoint (and the console's signed bulk form) does. Signed decisions in ``body`` go
    each to the run it names, when it answers that run's request.

    Args:
        state: The service.
        who: The caller (journaled with each run's action).
        action: The bulk action.
        chosen: Which runs.
        body: The request's body.
        options: The action's options (:meth:`~underway.client.Client.bulk`).
    """
    signer = _Given(body.decisions, who.tenant_id) if isinstance(body, _Signed) else None
    result = state.client.bulk(action, chosen, by=who.actor, tenant_id=who.tenant_id,
                               dry_run=body.dry_run, signer=signer,
                               **options)  # type: ignore[arg-type]
    return _report(result, signer.unused(result) if signer is not None else [])


@endpoint(router, "POST", "/resume", permission="steer", response_model=BulkReport,
          problems=(409,))
def resume_runs(state: State, who: Caller, chosen: RunQuery, body: BulkResume) -> BulkReport:
    """Resume every dead run the query selects (``status`` defaults to dead), unsigned.
    Where runs settle only with signed resolutions, a 409 says to use ``settle``."""
    return run_bulk(state, who, "resume", chosen, body, step=body.step)


@endpoint(router, "POST", "/cancel", permission="steer", response_model=BulkReport)
def cancel_runs(state: State, who: Caller, chosen: RunQuery, body: BulkCancel) -> BulkReport:
    """Cancel every unfinished run the query selects, at its next step boundary."""
    return run_bulk(state, who, "cancel", chosen, body, reason=body.reason)


@endpoint(router, "POST", "/resolve", permission="steer", response_model=BulkReport,
          problems=(409,))
def resolve_runs(state: State, who: Caller, chosen: RunQuery,
                 body: BulkResolve) -> BulkReport:
    """Resolve the escalation of every escalated run the query selects, unsigned (runs
    asking a question are skipped: answer them). Where runs settle only with signed
    resolutions, a 409 says to use ``settle``."""
    return run_bulk(state, who, "resolve", chosen, body, resolution=body.resolution,
                result=body.result)


@endpoint(router, "POST", "/settle", permission="decide", response_model=BulkReport)
def settle_runs(state: State, who: Caller, chosen: RunQuery, body: BulkSettle) -> BulkReport:
    """Settle every selected run with the resolution signed for it: resume dead runs
    (``status`` defaults to dead) or resolve escalations (to escalated)."""
    if body.resolution == "resume":
        return run_bulk(state, who, "resume", chosen, body, step=body.step)
    if body.step is not None:
        raise invalid("body.step", "a step goes with the resolution resume only")
    return run_bulk(state, who, "resolve", chosen, body, resolution=body.resolution,
                result=body.result)


@endpoint(router, "POST", "/answer", permission="decide", response_model=BulkReport)
def answer_runs(state: State, who: Caller, chosen: RunQuery, body: BulkAnswer) -> BulkReport:
    """Answer every run the query selects that asks ``question``, each with the decision
    signed for it (``status`` defaults to escalated)."""
    return run_bulk(state, who, "answer", chosen, body, question=body.question,
                answer=body.answer)


@endpoint(router, "POST", "/approve", permission="decide", response_model=BulkReport)
def approve_runs(state: State, who: Caller, chosen: RunQuery, body: BulkDecide) -> BulkReport:
    """Approve the action every selected run waits on, each with the decision signed
    for it (``status`` defaults to waiting)."""
    return run_bulk(state, who, "approve", chosen, body)


@endpoint(router, "POST", "/reject", permission="decide", response_model=BulkReport)
def reject_runs(state: State, who: Caller, chosen: RunQuery, body: BulkDecide) -> BulkReport:
    """Reject the action every selected run waits on, each with the decision signed
    for it (``status`` defaults to waiting)."""
    return run_bulk(state, who, "reject", chosen, body)
