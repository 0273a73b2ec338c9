"""Read endpoints for what the CLI and the client show besides runs: usage (``underway
usage``), the audit of the tenant's hash chains (``underway audit verify``), schedules,
queues, runs' labels, a data subject's runs, an approver, and who the key is."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, JsonValue

from ..guard.budgets import tenant_usage
from ..labels import LabelValue
from ..ops.audit import verify
from ..scheduling import schedules
from ..store.access import ALL_RUNS
from ._admin import Approver
from ._auth import Caller, State, endpoint
from ._inputs import CheckedRoute
from ._models import RunSummary, Subject
from ._problems import invalid, not_found
from ._reading import Purpose, Read

router = APIRouter(prefix="/v1", tags=["reads"], route_class=CheckedRoute)


class UsageReport(BaseModel):
    """What the tenant's runs spent since ``since``, counted from the journal."""

    since: float
    tokens_in: int
    tokens_out: int
    cost_usd: float
    model_calls: int
    tool_calls: int
    messages: int
    money: dict[str, float]


class Finding(BaseModel):
    """Something the audit found wrong in a run (at ``seq`` when it can say)."""

    run_id: str | None
    seq: int | None
    reason: str


class AuditReport(BaseModel):
    """The audit of the tenant's journals: ``ok`` when every hash chain is intact."""

    ok: bool
    runs: int
    events: int
    findings: list[Finding]


class Schedule(BaseModel):
    """A cron schedule and when it fires next."""

    name: str
    flow: str
    cron: str
    timezone: str
    input: JsonValue
    queue: str
    enabled: bool
    next_fire_at: float
    last_fired_at: float | None
    created_at: float


class Queue(BaseModel):
    """A queue's limits (null: no limit)."""

    name: str
    max_concurrency: int | None
    rate_limit: int | None
    rate_period_s: float
    per_tenant: bool


@endpoint(router, "GET", "/usage", permission="read", run_data=True,
          response_model=UsageReport)
def get_usage(
    state: State, who: Caller, request: Request, purpose: Purpose,
    since: Annotated[float | None, Query(description="Epoch seconds (default: 00:00 UTC "
                                         "today).")] = None,
    days: Annotated[float | None, Query(gt=0, le=3660, description="The last N days "
                                        "instead of since.")] = None,
) -> UsageReport:
    """Tokens, model cost, model and tool calls, messages and money moved (read from every
    run's journal: the access log records it as a read of run ``*``)."""
    if since is not None and days is not None:
        raise invalid("query.days", "give since or days, not both")
    if days is not None:
        start = time.time() - days * 86400
    elif since is not None:
        start = since
    else:
        now = datetime.now(UTC)
        start = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp()
    u = tenant_usage(state.store, who.tenant_id, since=start)
    # Counted from every run's journal: one entry, for all of the tenant's runs.
    state.record_reads(request, who, [ALL_RUNS], purpose=purpose)
    return UsageReport(since=start, tokens_in=u.tokens_in, tokens_out=u.tokens_out,
                       cost_usd=round(u.cost_usd, 6), model_calls=u.model_calls,
                       tool_calls=u.tool_calls, messages=u.messages, money=dict(u.money))


@endpoint(router, "GET", "/audit/verify", permission="read", response_model=AuditReport,
          problems=(404,))
def verify_audit(
    state: State, who: Caller,
    run_id: Annotated[str | None, Query(min_length=1, description="Only this run.")] = None,
) -> AuditReport:
    """Verify the hash chains of the tenant's runs (or one run)."""
    if run_id is not None and state.store.get_run(who.tenant_id, run_id) is None \
            and not state.store.load_events(who.tenant_id, run_id):
        raise not_found("such run")
    report = verify(state.store, tenant_id=who.tenant_id, run_id=run_id)
    return AuditReport(
        ok=report.ok, runs=report.runs, events=report.events,
        findings=[Finding(run_id=f.run_id, seq=f.seq, reason=f.reason)
                  for f in report.findings],
    )


@endpoint(router, "GET", "/schedules", permission="read", response_model=list[Schedule])
def list_schedules(state: State, who: Caller) -> list[Schedule]:
    """The tenant's schedules by name."""
    return [
        Schedule(name=s.name, flow=s.flow, cron=s.cron, timezone=s.timezone, input=s.input,
                 queue=s.queue, enabled=s.enabled, next_fire_at=s.next_fire_at,
                 last_fired_at=s.last_fired_at, created_at=s.created_at)
        for s in schedules.list_schedules(state.client, tenant_id=who.tenant_id)
    ]


@endpoint(router, "GET", "/queues", permission="read", response_model=list[Queue])
def list_queues(state: State, who: Caller) -> list[Queue]:
    """Queues that have limits (shared by every tenant: limits are the operator's)."""
    return [Queue(name=c.name, max_concurrency=c.max_concurrency, rate_limit=c.rate_limit,
                  rate_period_s=c.rate_period_s, per_tenant=c.per_tenant)
            for c in state.store.list_queues()]


class Identity(BaseModel):
    """The API key a request was made with (its id, name, tenant and role), and whether
    this server settles escalations and dead runs only with signed resolutions."""

    key_id: str
    name: str
    tenant_id: str
    role: str
    signed_resolutions: bool


@endpoint(router, "GET", "/whoami", permission="read", response_model=Identity)
def get_identity(state: State, who: Caller) -> Identity:
    """The key this request was made with, and what the server asks of it (a client
    learns its tenant here, and whether to refuse unsigned resolutions up front)."""
    return Identity(key_id=who.key_id, name=who.name, tenant_id=who.tenant_id,
                    role=who.role, signed_resolutions=state.signed_resolutions)


@endpoint(router, "GET", "/labels", permission="read",
          response_model=dict[str, dict[str, LabelValue]], problems=(403,))
def list_labels(
    state: State, who: Caller, read: Read,
    run_id: Annotated[list[str], Query(min_length=1, max_length=1000,
                                       description="A run; repeat it for each run.")],
) -> dict[str, dict[str, LabelValue]]:
    """The labels of these runs, by run id (a run without labels, or not in the tenant,
    is left out); a sensitive label's value reads ``[redacted]`` unless ``reveal``."""
    read = read.allowed(state, who)
    return state.client.run_labels(run_id, tenant_id=who.tenant_id, reveal=read.reveal)


@endpoint(router, "GET", "/subjects/runs", permission="read",
          response_model=list[RunSummary])
def list_subject_runs(
    state: State, who: Caller, subject: Annotated[Subject, Query()],
    limit: Annotated[int | None, Query(ge=0, le=10_000)] = None,
) -> list[RunSummary]:
    """The tenant's runs about a data subject, oldest first."""
    return [RunSummary.of(r) for r in state.client.runs_of_subject(
        subject, tenant_id=who.tenant_id, limit=limit)]


@endpoint(router, "GET", "/approvers/{approver_id}", permission="read",
          response_model=Approver, problems=(404,))
def get_approver(state: State, who: Caller,
             approver_id: Annotated[str, Path(min_length=1, max_length=200)]) -> Approver:
    """A registered approver of the tenant: its public key (what a signed decision is
    checked with), roles and whether it was revoked."""
    found = state.store.get_approver(who.tenant_id, approver_id)
    if found is None:
        raise not_found("such approver")
    return Approver.of(found)
